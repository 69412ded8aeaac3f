// Every GEMM of the MultiheadAttention training step (src/workloads/mha.hpp) timed on xgrad's
// kernel (kernels/gemm_tiled.hpp) and on OpenBLAS, alternately in one process, one thread:
//   gemm_compare [--dtype float32|float64] [--configs "tiny small detr base"] [--reps R]
// Prints a markdown table: median µs of each, their ratio and the largest relative difference
// between the two results. This is what kernels::tiled::preferred is decided from.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <cblas.h>

#include "xgrad/kernels/gemm_tiled.hpp"

namespace {

struct Shape {
    const char* where;
    std::size_t m, n, k;
    bool a_trans, b_trans;
};

// (B, L, E, H) as in bench/compare.sh
const std::map<std::string, std::array<std::size_t, 4>> configs{
    {"tiny", {2, 6, 100, 5}}, {"small", {8, 32, 64, 4}}, {"detr", {8, 64, 256, 8}}, {"base", {8, 128, 512, 8}}};

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

using Clock = std::chrono::steady_clock;

template <class T>
void blas_gemm(const Shape& s, const T* a, const T* b, T* c) {
    const auto ta = s.a_trans ? CblasTrans : CblasNoTrans, tb = s.b_trans ? CblasTrans : CblasNoTrans;
    const int lda = int(s.a_trans ? s.m : s.k), ldb = int(s.b_trans ? s.k : s.n);
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(s.m), int(s.n), int(s.k), 1, a, lda, b, ldb, 0, c, int(s.n));
    else
        cblas_dgemm(CblasRowMajor, ta, tb, int(s.m), int(s.n), int(s.k), 1, a, lda, b, ldb, 0, c, int(s.n));
}

template <class T>
void kernel_gemm(const Shape& s, const T* a, const T* b, T* c) {
    xgrad::kernels::tiled::gemm(s.a_trans, s.b_trans, s.m, s.n, s.k, T(1), a, s.a_trans ? s.m : s.k, b,
                              s.b_trans ? s.k : s.n, T(0), c, s.n);
}

template <class T>
void run(const std::vector<std::string>& names, int reps) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> uniform(-1, 1);
    std::printf("| config | shape (m, n, k) | op | OpenBLAS µs | xgrad µs | ratio | max rel diff |\n|---|---|---|---|---|---|---|\n");
    for (const auto& name : names) {
        for (const Shape& s : shapes_of(configs.at(name))) {
            std::vector<T> a(s.m * s.k), b(s.k * s.n), c_blas(s.m * s.n), c_kernel(s.m * s.n);
            for (auto& v : a) v = T(uniform(rng));
            for (auto& v : b) v = T(uniform(rng));
            // about 0.2 s per shape and implementation, at least 5 calls
            const double flops = 2.0 * double(s.m * s.n * s.k);
            const int calls = std::max(5, std::min(reps, int(2e10 / flops)));
            std::vector<double> t_blas, t_kernel;
            for (int r = 0; r < calls + 2; ++r) {
                auto t0 = Clock::now();
                blas_gemm(s, a.data(), b.data(), c_blas.data());
                const double us_blas = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
                t0 = Clock::now();
                kernel_gemm(s, a.data(), b.data(), c_kernel.data());
                const double us_kernel = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
                if (r >= 2) t_blas.push_back(us_blas), t_kernel.push_back(us_kernel);
            }
            double diff = 0, scale = 0;
            for (std::size_t i = 0; i < c_blas.size(); ++i)
                diff = std::max(diff, std::fabs(double(c_blas[i]) - double(c_kernel[i]))),
                scale = std::max(scale, std::fabs(double(c_blas[i])));
            const auto median = [](std::vector<double> v) {
                std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
                return v[v.size() / 2];
            };
            const double mb = median(t_blas), mk = median(t_kernel);
            std::printf("| %s | %zu, %zu, %zu | %s%s %s | %.2f | %.2f | %.2f | %.1e |\n", name.c_str(), s.m, s.n, s.k,
                        s.a_trans ? "T" : "N", s.b_trans ? "T" : "N", s.where, mb, mk, mk / mb, diff / scale);
        }
    }
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
        if (!configs.count(w)) {
            std::fprintf(stderr, "gemm_compare: unknown configuration %s\n", w.c_str());
            return 2;
        }
        names.push_back(w);
    }
    openblas_set_num_threads(1);
    if (dtype == "float64") run<double>(names, reps);
    else run<float>(names, reps);
    return 0;
}
