// Every GEMM back end (kernels/gemm_backends.hpp: xgrad's kernel, OpenBLAS, oneDNN) and kernels::gemm
// against a plain triple loop in long double: every transpose, edge tiles, leading dimensions wider
// than the rows, alpha and beta, a bias added to every row, and beta = 0 never reading C (NaN there
// must not leak). Then how the back end is chosen (kernels/gemm_choice.hpp).
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "xgrad/kernels/gemm.hpp"

namespace test_ops_gemm {

using namespace xgrad;

struct Shape {
    std::size_t m, n, k;
};

template <class T>
struct Problem {
    bool a_trans, b_trans;
    Shape s;
    std::size_t lda, ldb, ldc;  // each 3 wider than the stored row
    std::vector<T> a, b, c, bias;  // bias: empty, or n values added to every row of C

    Problem(bool at, bool bt, Shape shape, T c_fill, std::mt19937& rng) : a_trans(at), b_trans(bt), s(shape) {
        std::normal_distribution<double> normal;
        lda = (at ? s.m : s.k) + 3, ldb = (bt ? s.k : s.n) + 3, ldc = s.n + 3;
        a.resize((at ? s.k : s.m) * lda), b.resize((bt ? s.n : s.k) * ldb), c.assign(s.m * ldc, c_fill);
        for (auto& v : a) v = T(normal(rng));
        for (auto& v : b) v = T(normal(rng));
        if (!std::isnan(c_fill))
            for (auto& v : c) v = T(normal(rng));
    }
    const T* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
    long double op_a(std::size_t i, std::size_t p) const { return a_trans ? a[p * lda + i] : a[i * lda + p]; }
    long double op_b(std::size_t p, std::size_t j) const { return b_trans ? b[j * ldb + p] : b[p * ldb + j]; }
};

// Largest |computed − expected| over C, relative to the largest |expected|, and whether the
// padding past each row of C was left alone.
template <class T, class Gemm>
std::pair<double, bool> error_of(Problem<T> pr, T alpha, T beta, Gemm gemm) {
    const std::vector<T> before = pr.c;
    gemm(pr);
    double worst = 0, scale = 1e-30;
    bool padding_kept = true;
    for (std::size_t i = 0; i < pr.s.m; ++i) {
        for (std::size_t j = 0; j < pr.s.n; ++j) {
            long double sum = 0;
            for (std::size_t p = 0; p < pr.s.k; ++p) sum += pr.op_a(i, p) * pr.op_b(p, j);
            const long double expected = alpha * sum + (beta == T(0) ? 0.0L : beta * (long double)before[i * pr.ldc + j]) +
                                         (pr.bias.empty() ? 0.0L : pr.bias[j]);
            worst = std::max(worst, double(std::fabs(pr.c[i * pr.ldc + j] - expected)));
            scale = std::max(scale, double(std::fabs(expected)));
        }
        for (std::size_t j = pr.s.n; j < pr.ldc; ++j)
            padding_kept = padding_kept && (std::isnan(before[i * pr.ldc + j]) ? std::isnan(pr.c[i * pr.ldc + j])
                                                                             : pr.c[i * pr.ldc + j] == before[i * pr.ldc + j]);
    }
    return {worst / scale, padding_kept};
}

template <class T>
void check_backend(kernels::GemmBackend backend, double tolerance) {
    std::mt19937 rng(7);
    // full tiles, edge rows and columns, a partial last vector, k of 1, and kernels::gemm's sizes.
    // C^T is computed for every TT and, with B transposed, for {100,130,600} (B > 128 KB and
    // wider than A has rows) and {12,300,100} in float64; {100,130,600} also takes A in blocks of
    // rows and, in float64, packs B even when not transposed (it spans > 512 KB)
    // One row of C, {1, 300, 100} and {1, 1000, 37}: OpenBLAS's matrix-vector product.
    const std::vector<Shape> shapes{{1, 1, 1},    {7, 13, 29},    {6, 64, 5},      {13, 70, 33},
                                    {33, 65, 40}, {64, 64, 64},   {37, 150, 3},    {12, 300, 100},
                                    {100, 130, 600}, {1, 300, 100}, {1, 1000, 37}};
    const std::vector<std::pair<T, T>> scalars{{T(1), T(0)}, {T(0.5), T(1)}, {T(2), T(-0.5)}};
    for (const auto& s : shapes)
        for (const auto& transposes : {std::pair{false, false}, {false, true}, {true, false}, {true, true}})
            for (const auto& [alpha_value, beta_value] : scalars)
                for (const bool with_bias : {false, true}) {
                    const bool at = transposes.first, bt = transposes.second;
                    const T alpha = alpha_value, beta = beta_value;
                    INFO("m ", s.m, " n ", s.n, " k ", s.k, " a_trans ", at, " b_trans ", bt, " alpha ", alpha, " beta ",
                         beta, " bias ", with_bias);
                    // beta = 0: C starts as NaN, which must not reach the result
                    const T c_fill = beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : T(0);
                    Problem<T> pr(at, bt, s, c_fill, rng);
                    if (with_bias)
                        for (std::size_t j = 0; j < s.n; ++j) pr.bias.push_back(T(0.25) * T(j % 7) - T(0.5));
                    const auto [err, padding_kept] = error_of(pr, alpha, beta, [&](Problem<T>& p) {
                        kernels::gemm_block(backend, at, bt, s.m, s.n, s.k, alpha, p.a.data(), p.lda, p.b.data(), p.ldb,
                                            beta, p.c.data(), p.ldc, p.bias_or_null());
                    });
                    CHECK(err < tolerance);
                    CHECK(padding_kept);
                }
}

TEST_CASE("every GEMM back end of this build matches a long-double triple loop (float32 and float64)") {
    for (const kernels::GemmBackend backend : kernels::all_gemm_backends) {
        INFO("back end ", kernels::backend_name(backend));
        if (kernels::backend_available<float>(backend)) check_backend<float>(backend, 1e-5);
        if (kernels::backend_available<double>(backend)) check_backend<double>(backend, 1e-13);
    }
    CHECK(kernels::backend_available<float>(kernels::GemmBackend::openblas));
    CHECK(kernels::backend_available<float>(kernels::GemmBackend::xgrad) == kernels::tiled::many_registers);
    CHECK_FALSE(kernels::backend_available<double>(kernels::GemmBackend::onednn));
}

TEST_CASE("kernels::gemm, whichever back end it chose, matches the triple loop") {
    std::mt19937 rng(11);
    for (const auto& transposes : {std::pair{false, false}, {false, true}, {true, false}, {true, true}})
        for (const Shape s : {Shape{40, 70, 36}, Shape{12, 300, 100}, Shape{9, 20, 3000}, Shape{5, 6, 0}})
            for (const double beta : {0.0, 1.0, -0.5})
                for (const bool with_bias : {false, true}) {  // the kernel's bias, or OpenBLAS's C prepared (k 3000)
                    const bool at = transposes.first, bt = transposes.second;
                    INFO("m ", s.m, " k ", s.k, " a_trans ", at, " b_trans ", bt, " beta ", beta, " bias ", with_bias);
                    Problem<double> pr(at, bt, s, beta == 0.0 ? std::numeric_limits<double>::quiet_NaN() : 0.0, rng);
                    if (with_bias)
                        for (std::size_t j = 0; j < s.n; ++j) pr.bias.push_back(0.5 * double(j % 5) - 1.0);
                    const auto [err, padding_kept] = error_of(pr, 1.5, beta, [&](Problem<double>& p) {
                        using kernels::Op;
                        kernels::gemm(at ? Op::trans : Op::none, bt ? Op::trans : Op::none, s.m, s.n, s.k, 1.5, p.a.data(),
                                      p.lda, p.b.data(), p.ldb, beta, p.c.data(), p.ldc, p.bias_or_null());
                    });
                    CHECK(err < 1e-13);
                    CHECK(padding_kept);
                }
}

TEST_CASE("a long k is summed in panels that accumulate onto C: beta, bias and NaN in C as for one call") {
    using kernels::GemmBackend;
    CHECK(kernels::detail::k_panel<float>(GemmBackend::xgrad, 2048) == 2048);  // 8 KB of a row of op(A): one call
    CHECK(kernels::detail::k_panel<float>(GemmBackend::onednn, 2049) == 1056);  // two equal panels, 32-aligned
    CHECK(kernels::detail::k_panel<float>(GemmBackend::xgrad, 50304) == 2016);  // lm_head's dX: 25 panels
    CHECK(kernels::detail::k_panel<kernels::bfloat16>(GemmBackend::onednn, 50304) == 3872);
    CHECK(kernels::detail::k_panel<double>(GemmBackend::xgrad, 3000) == 1024);
    CHECK(kernels::detail::k_panel<float>(GemmBackend::openblas, 50304) == 50304);  // it blocks k itself
    std::mt19937 rng(13);
    const auto check = [&]<class T>(GemmBackend backend, Shape s, double tolerance) {
        for (const auto& transposes : {std::pair{false, false}, {false, true}, {true, false}, {true, true}})
            for (const T beta : {T(0), T(-0.5)})
                for (const bool with_bias : {false, true}) {
                    const bool at = transposes.first, bt = transposes.second;
                    INFO("back end ", kernels::backend_name(backend), " m ", s.m, " n ", s.n, " k ", s.k, " a_trans ", at,
                         " b_trans ", bt, " beta ", beta, " bias ", with_bias);
                    Problem<T> pr(at, bt, s, beta == T(0) ? std::numeric_limits<T>::quiet_NaN() : T(0), rng);
                    if (with_bias)
                        for (std::size_t j = 0; j < s.n; ++j) pr.bias.push_back(T(0.5) * T(j % 5) - T(1));
                    const auto [err, padding_kept] = error_of(pr, T(1.5), beta, [&](Problem<T>& p) {
                        kernels::detail::gemm_blocks(backend, at, bt, s.m, s.n, s.k, T(1.5), p.a.data(), p.lda, p.b.data(),
                                                     p.ldb, beta, p.c.data(), p.ldc, p.bias_or_null());
                    });
                    CHECK(err < tolerance);
                    CHECK(padding_kept);
                }
    };
    for (const GemmBackend backend : kernels::all_gemm_backends) {
        for (const Shape s : {Shape{9, 20, 5000}, Shape{40, 9, 5000}})  // column blocks, then row blocks
            if (kernels::backend_available<float>(backend)) check.operator()<float>(backend, s, 1e-5);
        if (kernels::backend_available<double>(backend)) check.operator()<double>(backend, Shape{7, 33, 2100}, 1e-13);
    }
}

TEST_CASE("every GEMM back end gives the same bits at 1 and 2 threads") {
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    for (const kernels::GemmBackend backend : kernels::all_gemm_backends) {
        if (!kernels::backend_available<float>(backend)) continue;
        // (256, 768, 3072) is a GPT-2 product where oneDNN's k blocking follows the call's rows, and
        // (1, 40000, 288) a Llama's output layer at one position (in column panels); the libraries'
        // shapes only: xgrad's kernel is compiled at -O0 in the sanitizer build
        const bool xgrad = backend == kernels::GemmBackend::xgrad;
        for (const Shape s : xgrad ? std::vector<Shape>{{200, 300, 500}} : std::vector<Shape>{{256, 768, 3072}, {1, 40000, 288}}) {
            std::vector<float> a(s.m * s.k), b(s.k * s.n), one(s.m * s.n), two(s.m * s.n);
            for (auto& v : a) v = normal(rng);
            for (auto& v : b) v = normal(rng);
            for (auto* out : {&one, &two}) {
                set_num_threads(out == &one ? 1 : 2);
                kernels::detail::gemm_blocks(backend, false, true, s.m, s.n, s.k, 1.0f, a.data(), s.k, b.data(), s.k,
                                             0.0f, out->data(), s.n, static_cast<const float*>(nullptr));
            }
            set_num_threads(1);
            INFO("back end ", std::string(kernels::backend_name(backend)), " m ", s.m);
            CHECK(one == two);
        }
    }
}

TEST_CASE("GEMM back end choice: the fastest by 3 %, shared through the cache file, or forced") {
    using kernels::GemmBackend, kernels::GemmChoices;
    const kernels::GemmClass cls = kernels::gemm_class<float>(false, true, 40, 70, 36);
    CHECK(cls.str() == "f32 NT m<=2^6 n<=2^7 k<=2^6");
    CHECK(kernels::gemm_class<double>(true, false, 64, 65, 1).str() == "f64 TN m<=2^6 n<=2^7 k<=2^0");
    CHECK(kernels::gemm_class<kernels::bfloat16>(false, true, 64, 65, 2).str() == "bf16 NT m<=2^6 n<=2^7 k<=2^1");
    // seconds per back end, as the timing callback reports them; counts the calls
    int calls = 0;
    const auto timed = [&](double xgrad, double openblas, double onednn) {
        return [&calls, xgrad, openblas, onednn](GemmBackend b) {
            ++calls;
            return b == GemmBackend::xgrad ? xgrad : b == GemmBackend::openblas ? openblas : onednn;
        };
    };
    const bool have_xgrad = kernels::backend_available<float>(GemmBackend::xgrad);
    const bool have_onednn = kernels::backend_available<float>(GemmBackend::onednn);
    SUBCASE("measured: a later back end must be 3 % faster; kept for the process") {
        GemmChoices choices(nullptr, "");
        CHECK(choices.choose<float>(cls, timed(1.0, 0.98, 2.0)) == (have_xgrad ? GemmBackend::xgrad : GemmBackend::openblas));
        const int measured = calls;
        CHECK(measured > 0);
        CHECK(choices.choose<float>(cls, timed(9, 9, 0.1)) == (have_xgrad ? GemmBackend::xgrad : GemmBackend::openblas));
        CHECK(calls == measured);  // not measured again
        const auto other = kernels::gemm_class<float>(false, false, 8, 8, 8);
        CHECK(choices.choose<float>(other, timed(1.0, 0.5, 0.9)) == GemmBackend::openblas);
        CHECK(choices.list().size() == 2);
    }
    SUBCASE("a second process adopts the choice recorded in the file, whatever it measures") {
        const auto dir = std::filesystem::temp_directory_path() / ("xgrad-gemm-test-" + std::to_string(::getpid()));
        std::filesystem::remove_all(dir);
        GemmChoices first(nullptr, dir), second(nullptr, dir);
        CHECK(first.choose<float>(cls, timed(2.0, 1.0, 3.0)) == GemmBackend::openblas);
        REQUIRE(std::filesystem::exists(first.file()));
        CHECK(second.file() == first.file());
        CHECK(second.choose<float>(cls, timed(0.1, 9.0, 9.0)) == GemmBackend::openblas);
        std::ifstream file(first.file());
        std::string header;
        std::getline(file, header);
        CHECK(header.rfind("# gemm choices v5;", 0) == 0);  // what the file's name is a hash of
        std::filesystem::remove_all(dir);
    }
    SUBCASE("XGRAD_GEMM: forced without measuring; double falls back to measuring; bad names throw") {
        GemmChoices forced("openblas", "");
        CHECK(forced.choose<float>(cls, timed(0.1, 9, 9)) == GemmBackend::openblas);
        CHECK(calls == 0);
        // bfloat16 operands too: OpenBLAS multiplies them widened to float
        const auto bf16 = kernels::gemm_class<kernels::bfloat16>(false, true, 40, 70, 36);
        CHECK(forced.choose<kernels::bfloat16>(bf16, timed(0.1, 9, 0.1)) == GemmBackend::openblas);
        CHECK(calls == 0);
        if (have_onednn) {
            GemmChoices onednn("onednn", "");
            CHECK(onednn.choose<float>(cls, timed(0.1, 9, 9)) == GemmBackend::onednn);
            CHECK(onednn.choose<double>(kernels::gemm_class<double>(false, true, 40, 70, 36), timed(9, 0.1, 9)) ==
                  GemmBackend::openblas);
            CHECK(kernels::backend_available<kernels::bfloat16>(GemmBackend::onednn));
        }
        GemmChoices unknown("mkl", "");
        CHECK_THROWS_WITH_AS(unknown.choose<float>(cls, timed(1, 1, 1)),
                             "XGRAD_GEMM: unknown GEMM back end 'mkl' (xgrad, openblas, onednn or auto)", value_error);
        GemmChoices automatic("auto", "");
        CHECK_FALSE(automatic.forced().has_value());
    }
}

}  // namespace test_ops_gemm
