// bfloat16 mixed precision (ops/autocast.hpp): rounding to bfloat16, kernels::gemm with bfloat16
// operands against a long-double loop over the rounded operands, and the tape keeping each node's
// precision for its backward. Parity with torch.autocast: tests/nn/gpt_parity.cpp.
#include <doctest/doctest.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace test_ops_autocast {

using namespace xgrad;
using kernels::to_bfloat16;
using kernels::to_float;

std::uint16_t bits(float x) { return to_bfloat16(x).bits; }

TEST_CASE("to_bfloat16 rounds to nearest even, keeps NaN and infinity, overflows to infinity") {
    CHECK(bits(1.0f) == 0x3f80);
    CHECK(bits(-2.0f) == 0xc000);
    CHECK(bits(1.0f + 0x1p-8f) == 0x3f80);              // halfway between 1 and 1 + 2^-7: to the even 1
    CHECK(bits(1.0f + 0x1p-7f + 0x1p-8f) == 0x3f82);    // halfway, odd below: up to 1 + 2^-6
    CHECK(bits(1.0f + 0x1p-8f + 0x1p-20f) == 0x3f81);   // past halfway: up
    CHECK(bits(std::numeric_limits<float>::infinity()) == 0x7f80);
    CHECK(bits(std::numeric_limits<float>::max()) == 0x7f80);  // as PyTorch: rounds up to inf
    CHECK(std::isnan(to_float(to_bfloat16(std::bit_cast<float>(0x7f800001u)))));  // low-bit NaN stays NaN
    CHECK(to_float(to_bfloat16(3.0f)) == 3.0f);
    CHECK(to_float(to_bfloat16(0.1f)) == doctest::Approx(0.1).epsilon(0x1p-9));
}

TEST_CASE("to_bfloat16 on matrices, 16 at a time and transposed: each element as the scalar rounding") {
    // rows of 1..40 (vector bodies and tails), ld past the width; ties, NaN, infinities, denormals
    const std::vector<float> specials{1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, std::numeric_limits<float>::infinity(),
                                      -std::numeric_limits<float>::max(), std::bit_cast<float>(0x7f800001u),
                                      std::numeric_limits<float>::denorm_min(), -0.0f};
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (std::size_t cols = 1; cols <= 40; ++cols) {
        const std::size_t rows = 3 + cols % 17, ld = cols + 5;
        std::vector<float> src(rows * ld);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = i % 5 == 0 ? specials[i / 5 % specials.size()] : normal(rng);
        std::vector<kernels::bfloat16> packed(rows * cols), transposed(rows * cols);
        kernels::to_bfloat16(src.data(), rows, cols, ld, packed.data());
        // the transpose of src read as (rows, cols) is its (cols, rows) transposed matrix
        kernels::to_bfloat16_transposed(src.data(), rows, cols, ld, transposed.data());
        std::size_t wrong = 0;
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t c = 0; c < cols; ++c) {
                const std::uint16_t expected = bits(src[r * ld + c]);
                wrong += packed[r * cols + c].bits != expected;
                wrong += transposed[c * rows + r].bits != expected;
            }
        CHECK_MESSAGE(wrong == 0, "cols " << cols);
    }
}

bool bfloat16_here() {
    const std::string why = bfloat16_unsupported();
    if (!why.empty()) MESSAGE("bfloat16 not tested on this machine: " << why);
    return why.empty();
}

// Largest |C − ref| / max|ref| for C = op(A) op(B) + bias (beta 0) with ref in long double over
// `round`(A), `round`(B).
template <class Round>
double relative_error(const std::vector<float>& c, const std::vector<float>& a, const std::vector<float>& b,
                      const std::vector<float>& bias, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k,
                      Round round) {
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            long double sum = bias[j];
            for (std::size_t p = 0; p < k; ++p)
                sum += (long double)round(ta ? a[p * m + i] : a[i * k + p]) * round(tb ? b[j * k + p] : b[p * n + j]);
            worst = std::max(worst, double(std::fabs(c[i * n + j] - sum)));
            scale = std::max(scale, double(std::fabs(sum)));
        }
    return worst / scale;
}

TEST_CASE("kernels::gemm under bfloat16: the rounded operands' product, accumulated in float32") {
    if (!bfloat16_here()) return;
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (auto [m, n, k] : {std::array<std::size_t, 3>{7, 13, 29}, {130, 70, 300}, {33, 300, 64}})
        for (bool ta : {false, true})
            for (bool tb : {false, true}) {
                CAPTURE(m);
                CAPTURE(n);
                CAPTURE(k);
                CAPTURE(ta);
                CAPTURE(tb);
                std::vector<float> a(m * k), b(k * n), bias(n), c(m * n, std::nanf(""));
                for (auto* v : {&a, &b, &bias})
                    for (float& x : *v) x = normal(rng);
                {
                    detail::MatmulPrecisionScope bf16(MatmulPrecision::bfloat16);
                    kernels::gemm(ta ? kernels::Op::trans : kernels::Op::none, tb ? kernels::Op::trans : kernels::Op::none,
                                  m, n, k, 1.0f, a.data(), b.data(), 0.0f, c.data(), bias.data());
                }
                const auto rounded = [](float x) { return to_float(to_bfloat16(x)); };
                const auto exact = [](float x) { return x; };
                CHECK(relative_error(c, a, b, bias, ta, tb, m, n, k, rounded) < 2e-6);
                CHECK(relative_error(c, a, b, bias, ta, tb, m, n, k, exact) > 3e-4);  // it did round
            }
}

TEST_CASE("gemm_rounded on every back end: oneDNN's bfloat16 kernels, or a float32 kernel on the widened operands") {
    if (!bfloat16_here()) return;
    std::mt19937 rng(5);
    std::normal_distribution<float> normal;
    // k 5000: oneDNN sums it in two panels of bfloat16, xgrad's kernel in three of the widened floats
    for (auto [m, n, k] : {std::array<std::size_t, 3>{5, 9, 17}, {64, 64, 64}, {40, 300, 33}, {6, 40, 5000}})
        for (bool b_trans : {false, true}) {
            CAPTURE(m);
            CAPTURE(n);
            CAPTURE(k);
            CAPTURE(b_trans);
            std::vector<float> a(m * k), b(k * n), bias(n), c0(m * n);
            for (auto* v : {&a, &b, &bias, &c0})
                for (float& x : *v) x = normal(rng);
            kernels::RoundedMatrix a16, b16;
            a16.round(a.data(), false, m, k, k);
            b16.round(b.data(), false, b_trans ? n : k, b_trans ? k : n, b_trans ? k : n);
            // C = 2 · A B + 0.5 · C0 + bias over the rounded operands, in long double
            const auto rounded = [](float x) { return (long double)to_float(to_bfloat16(x)); };
            std::vector<long double> expected(m * n);
            long double scale = 0;
            for (std::size_t i = 0; i < m; ++i)
                for (std::size_t j = 0; j < n; ++j) {
                    long double sum = 0;
                    for (std::size_t p = 0; p < k; ++p)
                        sum += rounded(a[i * k + p]) * rounded(b_trans ? b[j * k + p] : b[p * n + j]);
                    expected[i * n + j] = 2 * sum + 0.5L * c0[i * n + j] + bias[j];
                    scale = std::max(scale, std::fabs(expected[i * n + j]));
                }
            int backends = 0;
            for (kernels::GemmBackend backend : kernels::all_gemm_backends) {
                if (!kernels::backend_available<kernels::bfloat16>(backend)) continue;
                INFO("back end ", kernels::backend_name(backend));
                ++backends;
                std::vector<float> c = c0;
                kernels::detail::gemm_rounded_on(backend, a16, b16, b_trans, 2.0f, 0.5f, c.data(), n, bias.data());
                long double worst = 0;
                for (std::size_t e = 0; e < c.size(); ++e) worst = std::max(worst, std::fabs(c[e] - expected[e]));
                CHECK(double(worst / scale) < 2e-6);
            }
            CHECK(backends >= 2);  // oneDNN and at least OpenBLAS
        }
}

TEST_CASE("Autocast: a node keeps the precision it was recorded in for its backward, wherever backward runs") {
    if (!bfloat16_here()) return;
    const xt::xtensor<float, 2> xv = randn<2>(std::array<std::size_t, 2>{16, 32}, 1),
                                wv = randn<2>(std::array<std::size_t, 2>{24, 32}, 2),
                                seed = randn<2>(std::array<std::size_t, 2>{16, 24}, 3);
    // dW (24,32) = dYᵀ (24,16) · X (16,32), in float32 and in bfloat16 operands
    xt::xtensor<float, 2> dw_float = xt::zeros<float>(wv.shape()), dw_bf16 = dw_float;
    kernels::gemm(kernels::Op::trans, kernels::Op::none, 24, 32, 16, 1.0f, seed.data(), xv.data(), 0.0f, dw_float.data());
    {
        detail::MatmulPrecisionScope bf16(MatmulPrecision::bfloat16);
        kernels::gemm(kernels::Op::trans, kernels::Op::none, 24, 32, 16, 1.0f, seed.data(), xv.data(), 0.0f, dw_bf16.data());
    }
    REQUIRE(xt::amax(xt::abs(dw_bf16 - dw_float))() > 1e-3);

    auto x = parameter(xv), w = parameter(wv);
    SUBCASE("recorded under Autocast, backward after it: bfloat16") {
        Var<float, 2> y;
        {
            Autocast autocast(MatmulPrecision::bfloat16);
            y = linear(x, w);
        }
        CHECK(y.node()->matmul_precision == MatmulPrecision::bfloat16);
        CHECK(matmul_precision() == MatmulPrecision::float32);  // the scope ended
        backward(y, seed);
        CHECK(w.grad() == dw_bf16);
    }
    SUBCASE("recorded outside, backward inside Autocast: float32") {
        const Var<float, 2> y = linear(x, w);
        Autocast autocast(MatmulPrecision::bfloat16);
        backward(y, seed);
        CHECK(w.grad() == dw_float);
        CHECK(matmul_precision() == MatmulPrecision::bfloat16);  // restored after the walk
    }
    SUBCASE("float64 ignores it") {
        auto xd = parameter(xt::xtensor<double, 2>(xt::cast<double>(xv)));
        auto wd = parameter(xt::xtensor<double, 2>(xt::cast<double>(wv)));
        Autocast autocast(MatmulPrecision::bfloat16);
        const auto y = linear(xd, wd);
        backward(y, xt::xtensor<double, 2>(xt::cast<double>(seed)));
        CHECK(xt::amax(xt::abs(wd.grad() - xt::cast<double>(dw_float)))() < 1e-4);
    }
    tape().clear();
}

TEST_CASE("Autocast: a Linear's copies of X and W and its per-thread copies of dY serve every step") {
    // Y = X·Wᵀ, dX = dY·W, dW = dYᵀ·X against kernels::gemm's bfloat16 products, step after step:
    // each step's node reuses the previous step's (the tape's slot) and its buffers, stale
    // content of the same size or another
    if (!bfloat16_here()) return;
    using kernels::Op;
    const std::array<std::array<std::size_t, 3>, 4> shapes{{{8, 40, 12}, {16, 32, 24}, {16, 32, 24}, {24, 48, 40}}};
    for (std::size_t step = 0; step < shapes.size(); ++step) {
        const auto [rows, in, out] = shapes[step];
        const std::uint64_t seed = 10 + 3 * step;
        const xt::xtensor<float, 2> xv = randn<2>(std::array<std::size_t, 2>{rows, in}, seed),
                                    wv = randn<2>(std::array<std::size_t, 2>{out, in}, seed + 1),
                                    dy = randn<2>(std::array<std::size_t, 2>{rows, out}, seed + 2);
        xt::xtensor<float, 2> y_ref = xt::zeros<float>(dy.shape()), dx_ref = xt::zeros<float>(xv.shape()),
                              dw_ref = xt::zeros<float>(wv.shape());
        {
            detail::MatmulPrecisionScope bf16(MatmulPrecision::bfloat16);
            kernels::gemm(Op::none, Op::trans, rows, out, in, 1.0f, xv.data(), wv.data(), 0.0f, y_ref.data());
            kernels::gemm(Op::none, Op::none, rows, in, out, 1.0f, dy.data(), wv.data(), 0.0f, dx_ref.data());
            kernels::gemm(Op::trans, Op::none, out, in, rows, 1.0f, dy.data(), xv.data(), 0.0f, dw_ref.data());
        }
        auto x = parameter(xv), w = parameter(wv);
        Var<float, 2> y;
        {
            Autocast autocast(MatmulPrecision::bfloat16);
            y = linear(x, w);
        }
        backward(y, dy);
        INFO("step " << step);
        CHECK(y.value() == y_ref);
        CHECK(x.grad() == dx_ref);
        CHECK(w.grad() == dw_ref);
        CHECK(xt::amax(xt::abs(dw_ref))() > 1.0f);
        y = Var<float, 2>();
        tape().clear();  // the slot and its buffers wait for the next step's linear
    }
}

TEST_CASE("Autocast: linear without a backward (NoGrad) rounds as the recorded node does, bit for bit") {
    // the recorded node keeps its rounded X and W for backward; under NoGrad they are rounded into
    // kernels::gemm's per-thread buffers: the same operands, the same product
    if (!bfloat16_here()) return;
    const auto x = parameter(xt::xtensor<float, 3>(randn<3>(std::array<std::size_t, 3>{3, 16, 32}, 4)));
    const auto w = parameter(xt::xtensor<float, 2>(randn<2>(std::array<std::size_t, 2>{24, 32}, 5)));
    const auto b = parameter(xt::xtensor<float, 1>(randn<1>(std::array<std::size_t, 1>{24}, 6)));
    const auto r = parameter(xt::xtensor<float, 3>(randn<3>(std::array<std::size_t, 3>{3, 16, 24}, 7)));
    Autocast autocast(MatmulPrecision::bfloat16);
    const Var<float, 3> recorded = linear(x, w, b), recorded_gelu = linear(x, w, b, LinearActivation::gelu),
                        recorded_add = linear_add(r, x, w, b);
    REQUIRE(recorded.requires_grad());
    const NoGrad no_grad;
    for (int call = 0; call < 2; ++call) {  // the second call reuses the per-thread buffers
        const Var<float, 3> free = linear(x, w, b);
        CHECK(!free.requires_grad());
        CHECK(free.value() == recorded.value());
        CHECK(linear(x, w, b, LinearActivation::gelu).value() == recorded_gelu.value());
        CHECK(linear_add(r, x, w, b).value() == recorded_add.value());
    }
    const Var<float, 3> in_float32 = [&] {
        Autocast off(MatmulPrecision::float32);
        return linear(x, w, b);
    }();
    CHECK(xt::amax(xt::abs(in_float32.value() - recorded.value()))() > 1e-3);  // bfloat16 operands did round
    tape().clear();
}

TEST_CASE("Autocast reaches xgrad's worker threads: a parallel loop's chunks run in the caller's precision") {
    if (!bfloat16_here()) return;
    set_num_threads(2);
    Autocast autocast(MatmulPrecision::bfloat16);
    const std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> worker_ran = false, all_bfloat16 = true;
    // chunks of 200 µs each: long enough for the worker to wake and take one
    for (int attempt = 0; attempt < 500 && !worker_ran; ++attempt)
        parallel_for(4, 64 * parallel_min_share, [&](std::size_t, std::size_t) {
            const auto start = std::chrono::steady_clock::now();
            while (std::chrono::steady_clock::now() - start < std::chrono::microseconds(200)) {
            }
            if (std::this_thread::get_id() != caller) worker_ran = true;
            if (matmul_precision() != MatmulPrecision::bfloat16) all_bfloat16 = false;
        });
    set_num_threads(1);
    CHECK(worker_ran);
    CHECK(all_bfloat16);
}

// The kinds of attention node a MultiheadAttention forward records.
std::set<std::string> attention_ops_recorded(nn::MultiheadAttention<float>& m) {
    const auto x = parameter(xt::xtensor<float, 3>(randn<3>(std::array<std::size_t, 3>{2, 16, 32}, 4)));
    m.forward(x, x, x, {.need_weights = false});
    std::set<std::string> ops;
    for (std::size_t i = 0; i < tape().size(); ++i)
        if (std::string(tape()[i].op_name()).starts_with("attention")) ops.insert(tape()[i].op_name());
    tape().clear();
    return ops;
}

TEST_CASE("Autocast: attention runs the path whose products take bfloat16 operands, not the float32 fused one") {
    using nn::AttentionPath;
    using nn::detail::choose_path;
    CHECK(choose_path(AttentionPath::automatic, {.queries = 64, .keys = 64, .bfloat16 = true}) ==
          AttentionPath::weights_and_context);
    CHECK(choose_path(AttentionPath::automatic, {.queries = 64, .keys = 64}) == AttentionPath::fused);
    CHECK(choose_path(AttentionPath::automatic, {.queries = 1024, .keys = 1024, .causal = true, .bfloat16 = true}) ==
          AttentionPath::memory_efficient);
    CHECK_THROWS_AS(choose_path(AttentionPath::fused, {.queries = 64, .keys = 64, .bfloat16 = true}), value_error);
    if (!bfloat16_here()) return;
    Generator gen(5);
    nn::MultiheadAttention<float> m({.embed_dim = 32, .num_heads = 4, .batch_first = true}, gen);
    CHECK(attention_ops_recorded(m) == std::set<std::string>{"attention"});  // fused, float32
    std::set<std::string> ops;
    {
        Autocast autocast(MatmulPrecision::bfloat16);
        ops = attention_ops_recorded(m);
    }
    CHECK(ops == std::set<std::string>{"attention_weights", "attention_context"});
    {
        Autocast autocast(MatmulPrecision::bfloat16);
        const auto x = parameter(xt::xtensor<float, 3>(randn<3>(std::array<std::size_t, 3>{2, 16, 32}, 4)));
        const auto rounded = m.forward(x, x, x, {.need_weights = false}).output.value();
        tape().clear();
        Autocast float32(MatmulPrecision::float32);
        const auto exact = m.forward(x, x, x, {.need_weights = false}).output.value();
        const double change = xt::amax(xt::abs(rounded - exact))() / xt::amax(xt::abs(exact))();
        CHECK(change > 1e-4);  // rounded operands
        CHECK(change < 2e-2);  // by about bfloat16's precision, no more
        tape().clear();
    }
}

TEST_CASE("Autocast: the memory-efficient attention gives the two ops' results, its products in bfloat16 too") {
    if (!bfloat16_here()) return;
    Generator gen(6);
    nn::MultiheadAttention<float> m({.embed_dim = 32, .num_heads = 4, .batch_first = true}, gen);
    const auto x = parameter(xt::xtensor<float, 3>(randn<3>(std::array<std::size_t, 3>{2, 150, 32}, 7)));
    const xt::xtensor<float, 3> seed = randn<3>(std::array<std::size_t, 3>{2, 150, 32}, 8);
    const auto run = [&](nn::AttentionPath path, MatmulPrecision precision) {
        zero_grad(m), x.zero_grad();
        Autocast autocast(precision);
        const auto out = m.forward(x, x, x, {.need_weights = false, .is_causal = true, .path = path}).output;
        backward(out, seed);
        return std::pair{xt::xtensor<float, 3>(out.value()), xt::xtensor<float, 2>(m.in_proj_weight.grad())};
    };
    const auto [blocks, blocks_grad] = run(nn::AttentionPath::memory_efficient, MatmulPrecision::bfloat16);
    const auto [two_ops, two_ops_grad] = run(nn::AttentionPath::weights_and_context, MatmulPrecision::bfloat16);
    const auto [float32, float32_grad] = run(nn::AttentionPath::memory_efficient, MatmulPrecision::float32);
    // the same rounded operands, summed in another order: float32's rounding apart
    CHECK(xt::amax(xt::abs(blocks - two_ops))() < 1e-5);
    CHECK(xt::amax(xt::abs(blocks_grad - two_ops_grad))() < 1e-4);
    // and bfloat16's rounding visibly apart from float32's result
    CHECK(xt::amax(xt::abs(blocks - float32))() > 1e-4);
}

}  // namespace test_ops_autocast
