// linear_cross_entropy against the unfused pair cross_entropy(linear(x, W).view(-1, V)) it replaces:
// values and gradients in float64 (chunks of rows or one, ignore_index, label smoothing, both
// reductions, an upstream gradient other than 1, gradients accumulating), float32 under Autocast,
// NoGrad, and its errors. Gradchecks: checks/loss.cpp; GPT::loss: tests/nn/gpt.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include <xtensor/xview.hpp>

#include "support/fixtures.hpp"
#include "xgrad/xgrad.hpp"

namespace test_ops_linear_cross_entropy {

using namespace xgrad;
using I64 = std::int64_t;
using testing::max_abs_diff;

template <class T>
xt::xtensor<T, 3> normal3(std::size_t a, std::size_t b, std::size_t c, std::uint64_t seed) {
    Generator gen(seed);
    xt::xtensor<T, 3> out = xt::xtensor<T, 3>::from_shape({a, b, c});
    for (auto& v : out) v = T(gen.normal());
    return out;
}
template <class T>
xt::xtensor<T, 2> normal2(std::size_t a, std::size_t b, std::uint64_t seed) {
    Generator gen(seed);
    xt::xtensor<T, 2> out = xt::xtensor<T, 2>::from_shape({a, b});
    for (auto& v : out) v = T(gen.normal());
    return out;
}

struct Result {
    double loss;
    xt::xtensor<double, 3> grad_x;
    xt::xtensor<double, 2> grad_w;
};

// scale · loss + Σ W (W's gradient then accumulates onto ones), backward, the gradients of x and W.
template <class T, class Loss>
Result run(const xt::xtensor<T, 3>& x0, const xt::xtensor<T, 2>& w0, Loss loss_of, T scale = T(2.5)) {
    tape().clear();
    const Var<T, 3> x = parameter(x0);
    const Var<T, 2> w = parameter(w0);
    const Var<T, 0> loss = loss_of(x, w);
    backward(eval(loss * scale + sum(w)));
    Result r{double(loss.value()()), xt::cast<double>(x.grad()), xt::cast<double>(w.grad())};
    tape().clear();
    return r;
}

template <class T>
Var<T, 0> unfused(const Var<T, 3>& x, const Var<T, 2>& w, const xt::xtensor<I64, 2>& t,
                  const LinearCrossEntropyOptions& o) {
    const long V = long(w.shape(0));
    xt::xtensor<I64, 1> flat = xt::flatten(t);
    return cross_entropy(reshape<2>(linear(x, w), {-1, V}), flat,
                         {.ignore_index = o.ignore_index, .label_smoothing = o.label_smoothing, .reduction = o.reduction});
}

TEST_CASE("linear_cross_entropy equals cross_entropy(linear(x, W)) in value and gradients (float64)") {
    const auto x0 = normal3<double>(3, 5, 7, 1);
    const auto w0 = normal2<double>(11, 7, 2);
    xt::xtensor<I64, 2> t{{3, -100, 0, 10, 4}, {1, 1, 9, -100, 2}, {0, 5, 6, 7, 8}};
    // rows_per_chunk 0: these 15 rows keep dℓ/dlogits (15 · 11 <= (15 + 11) · 7); 4 and 1: in chunks
    for (const std::size_t chunk : {std::size_t(0), std::size_t(4), std::size_t(1)})
        for (const double smoothing : {0.0, 0.15})
            for (const LossReduction reduction : {LossReduction::mean, LossReduction::sum}) {
                const LinearCrossEntropyOptions o{.label_smoothing = smoothing, .reduction = reduction, .rows_per_chunk = chunk};
                INFO("rows_per_chunk ", chunk, " smoothing ", smoothing, " sum ", reduction == LossReduction::sum);
                const Result fused = run(x0, w0, [&](auto& x, auto& w) { return linear_cross_entropy(x, w, t, o); });
                const Result plain = run(x0, w0, [&](auto& x, auto& w) { return unfused(x, w, t, o); });
                CHECK(std::fabs(fused.loss - plain.loss) < 1e-12 * std::fabs(plain.loss));
                CHECK(max_abs_diff(fused.grad_x, plain.grad_x) < 1e-13);
                CHECK(max_abs_diff(fused.grad_w, plain.grad_w) < 1e-13);
                CHECK(xt::amax(xt::abs(fused.grad_x))() > 1e-3);  // a gradient, not zeros
                // ignored positions (0,1) and (1,3) get no gradient
                CHECK(xt::amax(xt::abs(xt::view(fused.grad_x, 0, 1, xt::all())))() == 0.0);
                CHECK(xt::amax(xt::abs(xt::view(fused.grad_x, 1, 3, xt::all())))() == 0.0);
            }
}

TEST_CASE("linear_cross_entropy under Autocast: the unfused pair's bfloat16 products, within float rounding") {
    if (const std::string why = bfloat16_unsupported(); !why.empty()) {
        MESSAGE("bfloat16 not tested on this machine: " << why);
        return;
    }
    // 16 rows keep dℓ/dlogits; 160 rows in chunks of 48 keep dℓ/dX and dℓ/dW
    for (const auto& [batch, chunk] : {std::pair<std::size_t, std::size_t>{2, 0}, {20, 48}}) {
        INFO("rows ", batch * 8, " rows_per_chunk ", chunk);
        const auto x0 = normal3<float>(batch, 8, 64, 3);
        const auto w0 = normal2<float>(300, 64, 4);
        xt::xtensor<I64, 2> t = xt::xtensor<I64, 2>::from_shape({batch, 8});
        for (std::size_t i = 0; i < t.size(); ++i) t.data()[i] = I64((i * 37) % 300);
        const LinearCrossEntropyOptions o{.rows_per_chunk = chunk};
        // upstream gradient 2: the chunked form rounds dℓ/dZ to bfloat16 before backward scales it,
        // the unfused pair after; a power of two scales a bfloat16 value exactly
        const Result reference = run(x0, w0, [&](auto& x, auto& w) { return unfused(x, w, t, o); }, 2.0f);
        Autocast autocast(MatmulPrecision::bfloat16);
        const Result fused = run(x0, w0, [&](auto& x, auto& w) { return linear_cross_entropy(x, w, t, o); }, 2.0f);
        const Result plain = run(x0, w0, [&](auto& x, auto& w) { return unfused(x, w, t, o); }, 2.0f);
        CHECK(std::fabs(fused.loss - plain.loss) < 1e-6 * std::fabs(plain.loss));
        CHECK(max_abs_diff(fused.grad_x, plain.grad_x) < 1e-6 * xt::amax(xt::abs(plain.grad_x))());
        CHECK(max_abs_diff(fused.grad_w, plain.grad_w) < 1e-5 * xt::amax(xt::abs(plain.grad_w - 1.0))());
        // and bfloat16 is in use: float32's loss differs by more than float rounding
        CHECK(std::fabs(fused.loss - reference.loss) > 1e-5 * std::fabs(reference.loss));
    }
}

TEST_CASE("linear_cross_entropy: the tape's reused node switches forms and sizes step after step") {
    // the same tape slot each time (nothing else is recorded before it): dℓ/dlogits kept, chunks,
    // no rows at all (a sum of nothing: 0, and no gradient), then dℓ/dlogits again
    const auto w0 = normal2<double>(5, 4, 9);
    const auto x_full = normal3<double>(2, 3, 4, 10);
    const auto x_none = xt::xtensor<double, 3>::from_shape({0, 3, 4});
    const xt::xtensor<I64, 2> t_full{{4, 0, 1}, {2, 3, 4}};
    const auto t_none = xt::xtensor<I64, 2>::from_shape({0, 3});
    struct Step {
        const xt::xtensor<double, 3>* x;
        const xt::xtensor<I64, 2>* t;
        std::size_t chunk;
    };
    const std::vector<Step> steps{{&x_full, &t_full, 0}, {&x_full, &t_full, 2}, {&x_none, &t_none, 2}, {&x_full, &t_full, 0}};
    std::vector<Result> expected;
    for (const Step& st : steps) {
        const LinearCrossEntropyOptions o{.reduction = LossReduction::sum, .rows_per_chunk = st.chunk};
        expected.push_back(run(*st.x, w0, [&](auto& x, auto& w) { return unfused(x, w, *st.t, o); }));
    }
    for (std::size_t i = 0; i < steps.size(); ++i) {
        INFO("step ", i);
        const LinearCrossEntropyOptions o{.reduction = LossReduction::sum, .rows_per_chunk = steps[i].chunk};
        const Result r = run(*steps[i].x, w0, [&](auto& x, auto& w) { return linear_cross_entropy(x, w, *steps[i].t, o); });
        CHECK(std::fabs(r.loss - expected[i].loss) < 1e-12);
        CHECK(max_abs_diff(r.grad_x, expected[i].grad_x) < 1e-13);
        CHECK(max_abs_diff(r.grad_w, expected[i].grad_w) < 1e-13);
    }
    CHECK(expected[2].loss == 0.0);
    CHECK(xt::amax(xt::abs(expected[2].grad_w - 1.0))() == 0.0);  // Σ W's gradient alone
}

TEST_CASE("linear_cross_entropy: all targets ignored gives NaN with zero gradients; under NoGrad a value only") {
    const auto x0 = normal3<double>(1, 3, 4, 5);
    const auto w0 = normal2<double>(6, 4, 6);
    const xt::xtensor<I64, 2> ignored{{-100, -100, -100}};
    const Result r = run(x0, w0, [&](auto& x, auto& w) { return linear_cross_entropy(x, w, ignored); });
    CHECK(std::isnan(r.loss));
    CHECK(xt::amax(xt::abs(r.grad_x))() == 0.0);
    CHECK(xt::amax(xt::abs(r.grad_w - 1.0))() == 0.0);  // Σ W's gradient alone

    const xt::xtensor<I64, 2> t{{5, 0, 2}};
    const Result with_grad = run(x0, w0, [&](auto& x, auto& w) { return linear_cross_entropy(x, w, t); });
    const NoGrad no_grad;
    const Var<double, 0> value = linear_cross_entropy(constant(x0), constant(w0), t);
    CHECK(value.value()() == with_grad.loss);
    CHECK_FALSE(value.requires_grad());
}

TEST_CASE("linear_cross_entropy of x with no features: zero logits, a loss of log V per row") {
    const Var<double, 2> x = parameter(xt::xtensor<double, 2>::from_shape({2, 0}));
    const Var<double, 2> w = parameter(xt::xtensor<double, 2>::from_shape({3, 0}));
    const Var<double, 0> loss = linear_cross_entropy(x, w, xt::xtensor<I64, 1>{0, 2});
    CHECK(loss.value()() == doctest::Approx(std::log(3.0)).epsilon(1e-15));
    backward(loss);
    tape().clear();
}

TEST_CASE("linear_cross_entropy errors name the op, the operand and its shape") {
    const Var<double, 3> x = parameter(normal3<double>(2, 3, 4, 7));
    const Var<double, 2> w = parameter(normal2<double>(5, 4, 8));
    const xt::xtensor<I64, 2> t{{0, 1, 2}, {3, 4, 0}};
    const auto message = [](auto f) {
        try {
            f();
        } catch (const error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(message([&] { linear_cross_entropy(x, parameter(normal2<double>(5, 3, 9)), t); }) ==
          "linear_cross_entropy: weight (5, 3) does not fit x (2, 3, 4): it needs (classes, 4)");
    CHECK(message([&] { linear_cross_entropy(x, w, xt::xtensor<I64, 2>{{0, 1}, {2, 3}}); }) ==
          "linear_cross_entropy: targets have shape (2, 2) but x (2, 3, 4) needs its shape without the last axis");
    CHECK(message([&] { linear_cross_entropy(x, w, xt::xtensor<I64, 2>{{0, 1, 5}, {3, 4, 0}}); }) ==
          "linear_cross_entropy: target 5 at flat index 2 is out of range for 5 classes [0, 5) (ignore_index is -100)");
    CHECK(message([&] { linear_cross_entropy(x, w, t, {.label_smoothing = 1.5}); }).rfind(
              "linear_cross_entropy: label_smoothing must be in [0, 1]", 0) == 0);
    tape().clear();
}

}  // namespace test_ops_linear_cross_entropy
