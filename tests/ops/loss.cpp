// mse_loss and cross_entropy: PyTorch parity (tests/fixtures/make_loss_norm.py), errors (gradchecks:
// checks/loss.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>


#include "support/fixtures.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_loss {

using namespace xgrad;

namespace {

using testing::max_abs_diff;
const testing::Fixtures fixtures{"loss_norm"};

constexpr double tol = 1e-12;

using I64 = std::int64_t;

}  // namespace

TEST_CASE("mse_loss: hand-computed values and gradients") {
    auto x = parameter(xt::xtensor<double, 1>{1, 2, 3});
    auto t = parameter(xt::xtensor<double, 1>{0, 4, 3});
    auto loss = mse_loss(x, t);
    CHECK(loss.value()() == doctest::Approx(5.0 / 3));  // (1 + 4 + 0) / 3
    backward(loss);
    CHECK(max_abs_diff(x.grad(), xt::xtensor<double, 1>{2.0 / 3, -4.0 / 3, 0}) < tol);
    CHECK(max_abs_diff(t.grad(), xt::xtensor<double, 1>{-2.0 / 3, 4.0 / 3, 0}) < tol);
    CHECK(mse_loss(x, t, LossReduction::sum).value()() == 5.0);
    auto each = mse_loss(x, xt::xtensor<double, 1>{0, 4, 3}, unreduced);
    CHECK(max_abs_diff(each.value(), xt::xtensor<double, 1>{1, 4, 0}) == 0);
    // float, and an expression as input
    auto xf = parameter(xt::xtensor<float, 2>{{1.f, 2.f}});
    CHECK(mse_loss(xf * 2.f, xt::xtensor<float, 2>{{0.f, 0.f}}).value()() == doctest::Approx(10.f));
}

TEST_CASE("mse_loss matches PyTorch for every reduction, gradients to input and target") {
    const auto x0 = fixtures.get<2>("mse_x"), t0 = fixtures.get<2>("mse_t"), g = fixtures.get<2>("mse_g");
    for (std::string red : {"mean", "sum", "none"}) {
        CAPTURE(red);
        auto x = parameter(x0), t = parameter(t0);
        if (red == "none") {
            auto y = mse_loss(x, t, unreduced);
            CHECK(max_abs_diff(y.value(), fixtures.get<2>("mse_none_y")) < tol);
            backward(y, g);
        } else {
            auto y = mse_loss(x, t, red == "sum" ? LossReduction::sum : LossReduction::mean);
            CHECK(std::abs(y.value()() - fixtures.get<0>("mse_" + red + "_y")()) < tol);
            backward(y);
        }
        CHECK(max_abs_diff(x.grad(), fixtures.get<2>("mse_" + red + "_dx")) < tol);
        CHECK(max_abs_diff(t.grad(), fixtures.get<2>("mse_" + red + "_dt")) < tol);
    }
}

TEST_CASE("mse_loss errors") {
    auto x = parameter(randn<2>({2, 3}));
    CHECK_THROWS_AS(mse_loss(x, randn<2>({3, 2})), shape_error);
    CHECK_THROWS_WITH(mse_loss(x, parameter(randn<2>({2, 4}))),
                      "mse_loss: input (2, 3) and target (2, 4) must have the same shape");
}

TEST_CASE("cross_entropy: hand-computed values") {
    // uniform logits over 4 classes: loss log 4, gradient (p − one_hot) / N
    auto z = parameter(xt::xtensor<double, 2>{{0, 0, 0, 0}, {0, 0, 0, 0}});
    auto loss = cross_entropy(z, xt::xtensor<I64, 1>{1, 3});
    CHECK(loss.value()() == doctest::Approx(std::log(4.0)));
    backward(loss);
    CHECK(max_abs_diff(z.grad(), xt::xtensor<double, 2>{{0.125, -0.375, 0.125, 0.125}, {0.125, 0.125, 0.125, -0.375}}) <
          tol);
    // label smoothing 1: q uniform, so p − q = 0 and the loss is still log 4
    auto smooth = cross_entropy(z, xt::xtensor<I64, 1>{1, 3}, {.label_smoothing = 1.0});
    CHECK(smooth.value()() == doctest::Approx(std::log(4.0)));
    // logits (2): log(1 + e^{-2}) for the larger class; unbatched scalar target
    auto z1 = parameter(xt::xtensor<double, 1>{3, 1});
    CHECK(cross_entropy(z1, xt::xtensor<I64, 0>(0)).value()() == doctest::Approx(std::log1p(std::exp(-2.0))));
    // large logits stay finite (log-sum-exp shifted by the max)
    auto big = constant(xt::xtensor<double, 2>{{1000, 0}});
    CHECK(cross_entropy(big, xt::xtensor<I64, 1>{1}).value()() == doctest::Approx(1000));
}

TEST_CASE("cross_entropy matches PyTorch: plain, ignore_index, label_smoothing, each reduction") {
    const auto z0 = fixtures.get<2>("ce_z");
    const auto g = fixtures.get<1>("ce_g");
    const auto t = fixtures.get<1, I64>("ce_t"), t_ign = fixtures.get<1, I64>("ce_t_ign");
    struct Case {
        std::string name;
        xt::xtensor<I64, 1> targets;
        CrossEntropyOptions opt;
    };
    const Case cases[] = {{"plain", t, {}},
                          {"ignore", t_ign, {}},
                          {"ignore3", t, {.ignore_index = 3}},
                          {"smooth", t, {.label_smoothing = 0.1}},
                          {"smooth_ignore", t_ign, {.label_smoothing = 0.1}}};
    for (const auto& c : cases)
        for (std::string red : {"mean", "sum", "none"}) {
            CAPTURE(c.name);
            CAPTURE(red);
            const std::string key = "ce_" + c.name + "_" + red;
            auto z = parameter(z0);
            if (red == "none") {
                auto y = cross_entropy(z, c.targets, unreduced, c.opt);
                CHECK(max_abs_diff(y.value(), fixtures.get<1>(key + "_y")) < tol);
                backward(y, g);
            } else {
                auto opt = c.opt;
                opt.reduction = red == "sum" ? LossReduction::sum : LossReduction::mean;
                auto y = cross_entropy(z, c.targets, opt);
                CHECK(std::abs(y.value()() - fixtures.get<0>(key + "_y")()) < tol);
                backward(y);
            }
            CHECK(max_abs_diff(z.grad(), fixtures.get<2>(key + "_dz")) < tol);
        }
}

TEST_CASE("cross_entropy matches PyTorch for logits (N, C, L) with targets (N, L)") {
    const auto z0 = fixtures.get<3>("ce3_z");
    const auto t = fixtures.get<2, I64>("ce3_t");
    auto z = parameter(z0);
    auto y = cross_entropy(z, t, {.label_smoothing = 0.2});
    CHECK(std::abs(y.value()() - fixtures.get<0>("ce3_mean_y")()) < tol);
    backward(y);
    CHECK(max_abs_diff(z.grad(), fixtures.get<3>("ce3_mean_dz")) < tol);
    auto z2 = parameter(z0);
    auto each = cross_entropy(z2, t, unreduced, {.label_smoothing = 0.2});
    CHECK(max_abs_diff(each.value(), fixtures.get<2>("ce3_none_y")) < tol);
    backward(each, fixtures.get<2>("ce3_g"));
    CHECK(max_abs_diff(z2.grad(), fixtures.get<3>("ce3_none_dz")) < tol);
}

TEST_CASE("cross_entropy with the classes last equals PyTorch's class axis 1 on the permuted logits") {
    // (B 2, T 3, V 4) against (B, V, T): the same rows, the same targets; values and gradients
    const auto z0 = fixtures.get<3>("ce3_z");  // (N 2, C 4, L 3)
    const auto t = fixtures.get<2, I64>("ce3_t");
    auto z = parameter(z0);
    auto reference = cross_entropy(z, t, {.label_smoothing = 0.2});
    backward(reference);
    auto last = parameter(xt::xtensor<double, 3>(xt::transpose(z0, {0, 2, 1})));
    auto y = cross_entropy(last, t, {.label_smoothing = 0.2, .class_axis = -1});
    CHECK(std::abs(y.value()() - reference.value()()) < 1e-14);
    backward(y);
    CHECK(max_abs_diff(last.grad(), xt::xtensor<double, 3>(xt::transpose(z.grad(), {0, 2, 1}))) < 1e-14);
    CHECK_THROWS_WITH_AS(cross_entropy(last, t, {.class_axis = 2}), "cross_entropy: class_axis must be 1 or -1, got 2",
                         value_error);
}

TEST_CASE("cross_entropy: all targets ignored gives NaN with a zero gradient, as torch") {
    auto z = parameter(randn<2>({2, 3}));
    auto loss = cross_entropy(z, xt::xtensor<I64, 1>{-100, -100});
    CHECK(std::isnan(loss.value()()));
    backward(loss);
    CHECK(max_abs_diff(z.grad(), xt::xtensor<double, 2>(xt::zeros<double>({2, 3}))) == 0);
    auto total = cross_entropy(z, xt::xtensor<I64, 1>{-100, -100}, {.reduction = LossReduction::sum});
    CHECK(total.value()() == 0);
}

TEST_CASE("cross_entropy errors") {
    auto z = parameter(randn<2>({3, 4}));
    CHECK_THROWS_AS(cross_entropy(z, xt::xtensor<I64, 1>{0, 4, 1}), value_error);
    CHECK_THROWS_WITH(cross_entropy(z, xt::xtensor<I64, 1>{0, 1, -1}),
                      "cross_entropy: target -1 at flat index 2 is out of range for 4 classes [0, 4) "
                      "(ignore_index is -100)");
    CHECK_THROWS_AS(cross_entropy(z, xt::xtensor<I64, 1>{0, 1}), shape_error);
    CHECK_THROWS_WITH(cross_entropy(parameter(randn<3>({2, 4, 3})), xt::xtensor<I64, 2>{{0, 1}, {1, 2}}),
                      "cross_entropy: targets must have shape (2, 3) for logits (2, 4, 3) (class axis 1 removed), "
                      "got (2, 2)");
    CHECK_THROWS_AS(cross_entropy(z, xt::xtensor<I64, 1>{0, 1, 2}, {.label_smoothing = 1.5}), value_error);
    CHECK_THROWS_AS(cross_entropy(z, xt::xtensor<I64, 1>{0, 1, 2}, {.label_smoothing = -0.1}), value_error);
}

}  // namespace test_ops_loss
