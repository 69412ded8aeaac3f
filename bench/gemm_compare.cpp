// Every GEMM of the MultiheadAttention training step (src/workloads/mha.hpp) and of a GPT step
// (src/workloads/gpt.hpp) timed on each GEMM back end of this build (kernels/gemm_backends.hpp:
// xgrad's kernel, OpenBLAS, oneDNN) as kernels::gemm runs them (oneDNN in panels of 128 rows or
// columns), alternately in one process, one thread:
//   gemm_compare [--dtype float32|float64|bfloat16] [--configs "tiny small detr base gpt gpt2 llama"] [--reps R]
// (bfloat16: operands rounded once beforehand, then multiplied as kernels::gemm_rounded does)
// Prints a markdown table: median µs of each back end, each one's time over the fastest, the back
// end kernels::gemm runs for that shape on this CPU (its choice for the shape class, kernels/
// gemm_choice.hpp: from the shared choice file, or measured now) and its time over the fastest,
// and the largest relative difference from the first back end's result; then how many products
// the choice runs at 0.95 or more of the fastest back end's rate.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "xgrad/kernels/gemm.hpp"

namespace {

struct Shape {
    const char* where;
    std::size_t m, n, k;
    bool a_trans, b_trans;
    std::size_t per_step = 0;  // how many times a training step runs it (0: not counted)
};

// (B, L, E, H) as in bench/compare.sh
const std::map<std::string, std::array<std::size_t, 4>> configs{
    {"tiny", {2, 6, 100, 5}}, {"small", {8, 32, 64, 4}}, {"detr", {8, 64, 256, 8}}, {"base", {8, 128, 512, 8}}};
// (B, T, C, H, V): the default `train gpt` model and GPT-2 124M as in docs/performance.md
const std::map<std::string, std::array<std::size_t, 5>> gpt_configs{{"gpt", {12, 64, 128, 4, 113}},
                                                                    {"gpt2", {4, 64, 768, 12, 50304}}};

std::vector<Shape> shapes_of(std::array<std::size_t, 4> c) {
    const auto [B, L, E, H] = c;
    const std::size_t rows = L * B, D = E / H;
    return {{"in-projection", rows, 3 * E, E, false, true},   {"scores Q·Kᵀ", L, L, D, false, true},
            {"context P·V", L, D, L, false, false},          {"out-projection", rows, E, E, false, true},
            {"out-proj dX", rows, E, E, false, false},       {"out-proj dW", E, E, rows, true, false},
            {"dP = dO·Vᵀ", L, L, D, false, true},            {"dV = Pᵀ·dO", L, D, L, true, false},
            {"dQ = dS·K", L, D, L, false, false},            {"dK = dSᵀ·Q", L, D, L, true, false},
            {"in-proj dW", 3 * E, E, rows, true, false}};
}
// A block's linears (c_attn, attn c_proj, c_fc, mlp c_proj) and the lm_head, forward (X·Wᵀ),
// dX (dY·W) and dW (dYᵀ·X); attention's products are those of shapes_of.
std::vector<Shape> gpt_shapes_of(std::array<std::size_t, 5> c) {
    const auto [B, T, C, H, V] = c;
    const std::size_t rows = B * T;
    std::vector<Shape> out;
    const std::array<std::tuple<const char*, std::size_t, std::size_t>, 5> linears{
        {{"c_attn", C, 3 * C}, {"attn.c_proj", C, C}, {"c_fc", C, 4 * C}, {"mlp.c_proj", 4 * C, C}, {"lm_head", C, V}}};
    for (const auto& [name, in, out_features] : linears) {
        out.push_back({name, rows, out_features, in, false, true});
        out.push_back({"  dX", rows, in, out_features, false, false});
        out.push_back({"  dW", out_features, in, rows, true, false});
    }
    for (const Shape& s : shapes_of({B, T, C, H}))
        if (std::strchr(s.where, '=') || std::strstr(s.where, "Q·K") || std::strstr(s.where, "P·V")) out.push_back(s);
    return out;
}

// llama2.c's stories15M trained as bench/llama_compare.sh trains it: B 4, T 256, dim 288, 6 layers
// of 6 heads (head size 48), SwiGLU hidden 768, vocabulary 32000. Each Linear's forward, dX and dW
// once per layer (the output layer once), the attention's six products once per (batch, head) and
// layer: the sum of their fastest times is the least a step's products take on one core.
std::vector<Shape> llama_shapes() {
    constexpr std::size_t B = 4, T = 256, C = 288, H = 6, hidden = 768, V = 32000, layers = 6;
    constexpr std::size_t rows = B * T, heads = B * H * layers;
    std::vector<Shape> out;
    const std::array<std::tuple<const char*, std::size_t, std::size_t, std::size_t>, 4> linears{
        {{"wq wk wv wo", C, C, 4 * layers}, {"w1 w3", C, hidden, 2 * layers}, {"w2", hidden, C, layers},
         {"output", C, V, 1}}};
    for (const auto& [name, in, out_features, count] : linears) {
        out.push_back({name, rows, out_features, in, false, true, count});
        out.push_back({"  dX", rows, in, out_features, false, false, count});
        out.push_back({"  dW", out_features, in, rows, true, false, count});
    }
    for (Shape s : shapes_of({B, T, C, H}))
        if (std::strchr(s.where, '=') || std::strstr(s.where, "Q·K") || std::strstr(s.where, "P·V"))
            s.per_step = heads, out.push_back(s);
    return out;
}

using xgrad::kernels::bfloat16;

// A product's operands as the back ends get them, and a run on one back end as kernels::gemm runs it
// (on one thread: one call, or oneDNN's panels of 128). Operand float or double: A and B as they
// are; bfloat16: rounded once beforehand, as a Linear rounds X and W once for its products (op(A)
// packed, B as stored), then multiplied as gemm_rounded does.
template <class Operand, class T>
struct Product {
    static constexpr bool rounded = std::is_same_v<Operand, bfloat16>;
    const Shape& s;
    const T *a, *b;
    xgrad::kernels::RoundedMatrix a16, b16;

    Product(const Shape& shape, const T* a_, const T* b_) : s(shape), a(a_), b(b_) {
        if constexpr (rounded) {
            a16.round(a, s.a_trans, s.m, s.k, s.a_trans ? s.m : s.k);
            b16.round(b, false, s.b_trans ? s.n : s.k, s.b_trans ? s.k : s.n, s.b_trans ? s.k : s.n);
        }
    }
    xgrad::kernels::GemmClass shape_class() const {
        return xgrad::kernels::gemm_class<Operand>(s.a_trans && !rounded, s.b_trans, s.m, s.n, s.k);
    }
    void run(xgrad::kernels::GemmBackend backend, T* c) const {
        if constexpr (rounded)
            xgrad::kernels::detail::gemm_rounded_on(backend, a16, b16, s.b_trans, 1.0f, 0.0f, c, s.n, nullptr);
        else
            xgrad::kernels::detail::gemm_blocks(backend, s.a_trans, s.b_trans, s.m, s.n, s.k, T(1), a,
                                                s.a_trans ? s.m : s.k, b, s.b_trans ? s.k : s.n, T(0), c, s.n,
                                                static_cast<const T*>(nullptr));
    }
};

template <class Operand>
void run(const std::vector<std::string>& names, int reps) {
    using xgrad::kernels::GemmBackend;
    using T = std::conditional_t<std::is_same_v<Operand, double>, double, float>;  // of A, B and C
    std::vector<GemmBackend> backends;
    for (GemmBackend b : xgrad::kernels::all_gemm_backends)
        if (xgrad::kernels::backend_available<Operand>(b)) backends.push_back(b);
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> uniform(-1, 1);
    std::printf("| config | shape (m, n, k) | op |");
    for (GemmBackend b : backends) std::printf(" %s µs (/ fastest) |", xgrad::kernels::backend_name(b));
    std::printf(" GFLOP/s of the fastest | chosen (/ fastest) | max rel diff |\n|---|---|---|");
    for (std::size_t i = 0; i < backends.size() + 3; ++i) std::printf("---|");
    std::printf("\n");
    int products = 0, near_fastest = 0;
    std::string step_lines;
    double worst = 0;
    std::string worst_shape;
    for (const auto& name : names) {
        const std::vector<Shape> shapes = name == "llama"         ? llama_shapes()
                                          : configs.count(name) ? shapes_of(configs.at(name))
                                                                : gpt_shapes_of(gpt_configs.at(name));
        double step_fastest = 0, step_chosen = 0;
        for (const Shape& s : shapes) {
            std::vector<T> a(s.m * s.k), b(s.k * s.n);
            std::vector<std::vector<T>> c(backends.size(), std::vector<T>(s.m * s.n));
            for (auto& v : a) v = T(uniform(rng));
            for (auto& v : b) v = T(uniform(rng));
            const Product<Operand, T> product(s, a.data(), b.data());
            // about 0.2 s per shape and back end, at least 5 calls
            const double flops = 2.0 * double(s.m * s.n * s.k);
            const int calls = std::max(5, std::min(reps, int(2e10 / flops)));
            std::vector<std::vector<double>> times(backends.size());
            for (int r = 0; r < calls + 2; ++r)
                for (std::size_t i = 0; i < backends.size(); ++i) {
                    const double seconds =
                        xgrad::kernels::detail::seconds_of([&] { product.run(backends[i], c[i].data()); });
                    if (r >= 2) times[i].push_back(seconds * 1e6);
                }
            double diff = 0, scale = 0;
            for (std::size_t i = 1; i < backends.size(); ++i)
                for (std::size_t e = 0; e < c[0].size(); ++e)
                    diff = std::max(diff, std::fabs(double(c[i][e]) - double(c[0][e]))),
                    scale = std::max(scale, std::fabs(double(c[0][e])));
            std::vector<double> medians;
            for (auto& t : times) {
                std::nth_element(t.begin(), t.begin() + long(t.size() / 2), t.end());
                medians.push_back(t[t.size() / 2]);
            }
            const double fastest = *std::min_element(medians.begin(), medians.end());
            std::vector<T> scratch(s.m * s.n);
            const GemmBackend chosen = xgrad::kernels::GemmChoices::instance().choose<Operand>(
                product.shape_class(), [&](GemmBackend candidate) {
                    return xgrad::kernels::detail::seconds_of([&] { product.run(candidate, scratch.data()); });
                });
            const double chosen_ratio =
                medians[std::size_t(std::find(backends.begin(), backends.end(), chosen) - backends.begin())] / fastest;
            ++products;
            near_fastest += chosen_ratio <= 1 / 0.95;
            if (chosen_ratio > worst) {
                worst = chosen_ratio;
                std::ostringstream where;
                where << name << " " << s.where << " (" << s.m << ", " << s.n << ", " << s.k << ")";
                worst_shape = where.str();
            }
            std::printf("| %s | %zu, %zu, %zu | %s%s %s |", name.c_str(), s.m, s.n, s.k, s.a_trans ? "T" : "N",
                        s.b_trans ? "T" : "N", s.where);
            for (double m : medians) std::printf(" %.2f (%.2f) |", m, m / fastest);
            std::printf(" %.1f | %s (%.2f) | %.1e |\n", flops / fastest * 1e-3, xgrad::kernels::backend_name(chosen),
                        chosen_ratio, scale > 0 ? diff / scale : 0.0);
            step_fastest += double(s.per_step) * fastest * 1e-3, step_chosen += double(s.per_step) * fastest * chosen_ratio * 1e-3;
        }
        if (step_fastest > 0) {
            char line[200];
            std::snprintf(line, sizeof line, "%s: a training step's products take %.0f ms on the fastest back end of each,"
                          " %.0f ms on kernels::gemm's choices\n", name.c_str(), step_fastest, step_chosen);
            step_lines += line;
        }
    }
    std::printf("\nkernels::gemm's choice runs %d of %d products at 0.95 or more of the fastest back end's rate;"
                " the slowest at %.2f of the fastest's time: %s\n",
                near_fastest, products, worst, worst_shape.c_str());
    std::printf("%s", step_lines.c_str());
}

}  // namespace

int main(int argc, char** argv) {
    std::string dtype = "float32", list = "tiny small detr base";
    int reps = 2000;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--dtype") dtype = argv[i + 1];
        else if (flag == "--configs") list = argv[i + 1];
        else if (flag == "--reps") reps = std::atoi(argv[i + 1]);
        else {
            std::fprintf(stderr, "gemm_compare: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    std::vector<std::string> names;
    std::istringstream words(list);
    for (std::string w; words >> w;) {
        if (w != "llama" && !configs.count(w) && !gpt_configs.count(w)) {
            std::fprintf(stderr, "gemm_compare: unknown configuration %s\n", w.c_str());
            return 2;
        }
        names.push_back(w);
    }
    openblas_set_num_threads(1);
    if (dtype == "float64") run<double>(names, reps);
    else if (dtype == "bfloat16") run<xgrad::kernels::bfloat16>(names, reps);
    else if (dtype == "float32") run<float>(names, reps);
    else {
        std::fprintf(stderr, "gemm_compare: --dtype is float32, float64 or bfloat16, not %s\n", dtype.c_str());
        return 2;
    }
    return 0;
}
