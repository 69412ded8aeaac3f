// softmax, log_softmax and masked_softmax: values (by hand and against PyTorch fixtures), gradients
// against PyTorch, exact zeros at masked positions, fully masked rows, errors (gradchecks:
// checks/softmax.cpp).
#include <cmath>
#include <cstdint>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xbroadcast.hpp>
#include <xtensor/xview.hpp>

#include "support/fixtures.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_softmax {

using namespace xgrad;
using T1 = xt::xtensor<double, 1>;
using T2 = xt::xtensor<double, 2>;
using T3 = xt::xtensor<double, 3>;
using B2 = xt::xtensor<bool, 2>;
using B3 = xt::xtensor<bool, 3>;

namespace {
constexpr double inf = std::numeric_limits<double>::infinity();

using testing::max_abs_diff;
template <std::size_t N>
xt::xtensor<double, N> load(const std::string& name) {
    return testing::fixture<N>("softmax", name);
}
template <std::size_t N>
xt::xtensor<bool, N> load_bool(const std::string& name) {
    return xt::xtensor<bool, N>(xt::not_equal(load<N>(name), 0.0));
}
// y = f(x) and dx for the fixture's upstream gradient g, against PyTorch's, to 1e-12.
template <std::size_t N, class F>
void check_fixture(const std::string& name, F f) {
    INFO("fixture " << name);
    auto x = parameter(load<N>(name + "_x"));
    Var<double, N> y = f(x);
    backward(y, load<N>(name + "_g"));
    CHECK(max_abs_diff(y.value(), load<N>(name + "_y")) < 1e-12);
    CHECK(max_abs_diff(x.grad(), load<N>(name + "_dx")) < 1e-12);
}
// every element of `a` where `where` holds is exactly zero
template <class A, class W>
bool zero_where(const A& a, const W& where) {
    for (std::size_t i = 0; i < a.size(); ++i)
        if (where.data()[i] && a.data()[i] != 0.0) return false;
    return true;
}
}  // namespace

TEST_CASE("softmax and log_softmax match hand-computed values on any axis") {
    auto x = constant(T2{{1.0, 2.0, 3.0}, {0.0, 0.0, 0.0}});
    const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
    auto rows = softmax(x, -1).value();
    CHECK(rows(0, 0) == doctest::Approx(std::exp(1.0) / z).epsilon(1e-15));
    CHECK(rows(0, 2) == doctest::Approx(std::exp(3.0) / z).epsilon(1e-15));
    CHECK(rows(1, 1) == doctest::Approx(1.0 / 3).epsilon(1e-15));
    auto cols = softmax(x, 0).value();  // column 2: exp(3) / (exp(3) + 1)
    CHECK(cols(0, 2) == doctest::Approx(std::exp(3.0) / (std::exp(3.0) + 1)).epsilon(1e-15));
    CHECK(cols(1, 0) == doctest::Approx(1 / (std::exp(1.0) + 1)).epsilon(1e-15));
    auto logs = log_softmax(x, 1).value();
    CHECK(logs(0, 0) == doctest::Approx(1.0 - std::log(z)).epsilon(1e-15));
    CHECK(logs(1, 2) == doctest::Approx(-std::log(3.0)).epsilon(1e-15));
    // stable: huge scores do not overflow
    auto big = softmax(constant(T1{1000.0, 1000.0}), 0).value();
    CHECK(big(0) == 0.5);
    // float, and an expression argument is materialized first
    auto xf = constant(xt::xtensor<float, 1>{0.0f, std::log(3.0f)});
    CHECK(softmax(xf * 1.0f, 0).value()(1) == doctest::Approx(0.75f));
    auto mf = masked_softmax(constant(xt::xtensor<float, 2>{{0.0f, 5.0f, std::log(3.0f)}}),
                             keep_mask(xt::xtensor<bool, 1>{true, false, true}));
    CHECK(mf.value()(0, 1) == 0.0f);
    CHECK(mf.value()(0, 2) == doctest::Approx(0.75f));
}

TEST_CASE("a reused tape slot recomputes softmax for a new shape and mask") {
    Tape local;
    TapeScope scope(local);
    for (std::size_t S : {3u, 5u}) {
        auto x = parameter(T2(xt::zeros<double>(std::array<std::size_t, 2>{2, S})));
        auto y = masked_softmax(x, valid_lens(xt::xtensor<int, 1>{2, 1}));
        CHECK(y.value()(0, 1) == 0.5);
        CHECK(y.value()(0, S - 1) == 0.0);
        CHECK(y.value()(1, 0) == 1.0);
        backward(y, T2(xt::ones<double>(std::array<std::size_t, 2>{2, S})));  // softmax's rows sum to 1: the gradient of sum is 0
        CHECK(xt::all(xt::equal(x.grad(), 0.0)));
        local.clear();
    }
    CHECK(local.capacity() == 1);
}

TEST_CASE("softmax and log_softmax match PyTorch forward and backward") {
    check_fixture<3>("softmax_ax1", [](auto& x) { return softmax(x, 1); });
    check_fixture<3>("softmax_axm1", [](auto& x) { return softmax(x, -1); });
    check_fixture<2>("softmax_2d_ax0", [](auto& x) { return softmax(x, 0); });
    check_fixture<3>("log_softmax_ax0", [](auto& x) { return log_softmax(x, 0); });
    check_fixture<2>("log_softmax_axm1", [](auto& x) { return log_softmax(x, -1); });
    check_fixture<2>("softmax_large", [](auto& x) { return softmax(x * 1000.0 + 500.0, -1); });
}

TEST_CASE("masked_softmax matches PyTorch for every mask kind") {
    const auto pad = load_bool<4>("ignore_pad_mask");  // (2, 1, 1, 4), True = ignore
    check_fixture<4>("ignore_pad", [&](auto& x) { return masked_softmax(x, ignore_mask(pad)); });
    const auto keep = load_bool<2>("keep_sdpa_mask");  // (3, 5), True = attend (SDPA)
    check_fixture<3>("keep_sdpa", [&](auto& x) { return masked_softmax(x, keep_mask(keep)); });
    check_fixture<3>("causal_wide", [](auto& x) { return masked_softmax(x, causal); });
    check_fixture<3>("causal_tall", [](auto& x) { return masked_softmax(x, causal); });
    const auto bias = load<2>("additive_mask");  // (3, 4) with -inf entries
    check_fixture<4>("additive", [&](auto& x) { return masked_softmax(x, additive_mask(bias)); });
    const xt::xtensor<int, 1> lens1 = load<1>("valid_lens_b_lens");
    check_fixture<3>("valid_lens_b", [&](auto& x) { return masked_softmax(x, valid_lens(lens1)); });
    const xt::xtensor<long, 2> lens2 = load<2>("valid_lens_bq_lens");
    check_fixture<3>("valid_lens_bq", [&](auto& x) { return masked_softmax(x, valid_lens(lens2)); });
    const auto pad2 = load_bool<3>("ignore_causal_mask");  // (2, 1, 4)
    check_fixture<3>("ignore_causal", [&](auto& x) { return masked_softmax(x, ignore_mask(pad2), causal); });
    // a bool expression works as a mask too
    check_fixture<3>("keep_sdpa", [&](auto& x) { return masked_softmax(x, ignore_mask(!keep)); });
}

TEST_CASE("masked positions get exactly 0 weight and exactly 0 gradient") {
    const B2 ignore{{false, true, false, true}, {true, false, false, false}};  // (L, S) = (2, 4)
    auto x = parameter(randn<3>({3, 2, 4}, 9));
    auto y = masked_softmax(x, ignore_mask(ignore));
    backward(y, randn<3>({3, 2, 4}, 10));
    const B3 masked = xt::broadcast(ignore, std::array<std::size_t, 3>{3, 2, 4});
    CHECK(zero_where(y.value(), masked));
    CHECK(zero_where(x.grad(), masked));
    CHECK(xt::all(xt::not_equal(xt::where(masked, 1.0, y.value()), 0.0)));  // kept positions are positive
    const T3 row_sums = xt::sum(y.value(), {2}, xt::keep_dims);
    CHECK(xt::allclose(row_sums, 1.0, 0.0, 1e-15));
    // masked scores never leak, even when they are NaN or huge
    T3 poisoned = x.value();
    poisoned(0, 0, 1) = std::nan(""), poisoned(0, 1, 0) = 1e308;
    auto y2 = masked_softmax(constant(poisoned), ignore_mask(ignore));
    CHECK(zero_where(y2.value(), masked));
    CHECK(max_abs_diff(y2.value(), y.value()) == 0.0);
}

TEST_CASE("a fully masked row gives all-zero weights and zero gradient, never NaN") {
    auto x = parameter(randn<3>({2, 3, 4}, 11));
    const auto g = randn<3>({2, 3, 4}, 12);
    B3 ignore = xt::zeros<bool>({1, 3, 4});
    xt::view(ignore, 0, 1, xt::all()) = true;  // query row 1 sees nothing, in both batches
    const T2 neg_inf_row = xt::where(xt::view(ignore, 0, xt::all(), xt::all()), -inf, 0.0);
    const xt::xtensor<int, 2> zero_len{{4, 0, 2}, {3, 0, 1}};
    for (int kind = 0; kind < 4; ++kind) {
        CAPTURE(kind);
        x.zero_grad();
        Var<double, 3> y = kind == 0   ? masked_softmax(x, ignore_mask(ignore))
                           : kind == 1 ? masked_softmax(x, keep_mask(!ignore))
                           : kind == 2 ? masked_softmax(x, additive_mask(neg_inf_row))
                                       : masked_softmax(x, valid_lens(zero_len), causal);
        backward(y, g);
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t k = 0; k < 4; ++k) {
                CHECK(y.value()(b, 1, k) == 0.0);
                CHECK(x.grad()(b, 1, k) == 0.0);
            }
        CHECK(!xt::any(xt::isnan(y.value())));
        CHECK(!xt::any(xt::isnan(x.grad())));
        CHECK(y.value()(0, 0, 0) > 0.0);  // other rows still normalized
    }
}

TEST_CASE("softmax and log_softmax follow PyTorch on all -inf and NaN rows (NaN, never 0)") {
    const double nan = std::nan("");
    // torch.softmax / log_softmax of these rows: NaN for rows 0-4, [0.5, 0.5] / log 0.5 for row 5
    const T2 x{{-inf, -inf}, {nan, nan}, {-inf, nan}, {1.0, nan}, {nan, 1.0}, {0.0, 0.0}};
    const T2 x_t = xt::transpose(x);  // the same rows along axis 0 (inner > 1)
    for (bool log : {false, true}) {
        CAPTURE(log);
        const T2 y = log ? log_softmax(constant(x), -1).value() : softmax(constant(x), -1).value();
        const T2 yt = log ? log_softmax(constant(x_t), 0).value() : softmax(constant(x_t), 0).value();
        const double last = log ? std::log(0.5) : 0.5;
        for (std::size_t r = 0; r < 6; ++r)
            for (std::size_t c = 0; c < 2; ++c) {
                CAPTURE(r);
                if (r < 5) {
                    CHECK(std::isnan(y(r, c)));
                    CHECK(std::isnan(yt(c, r)));
                } else {
                    CHECK(y(r, c) == doctest::Approx(last));
                    CHECK(yt(c, r) == doctest::Approx(last));
                }
            }
    }
}

TEST_CASE("masked_softmax: an unmasked NaN makes its row NaN; a fully masked row stays 0") {
    const double nan = std::nan("");
    const T2 s{{nan, 1.0, 2.0}, {nan, nan, 0.5}, {1.0, 2.0, nan}};
    const B2 ignore{{false, true, true}, {true, true, true}, {false, false, true}};
    auto x = parameter(s);
    auto y = masked_softmax(x, ignore_mask(ignore));
    backward(y, T2{{1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}});
    for (std::size_t k = 0; k < 3; ++k) {
        CHECK(std::isnan(y.value()(0, k)));  // torch.softmax([nan, -inf, -inf]) = [nan, nan, nan]
        CHECK(y.value()(1, k) == 0.0);       // fully masked
        CHECK(x.grad()(1, k) == 0.0);
    }
    // row 2 = softmax([1, 2]) with the masked NaN at weight 0: [1, e] / (1 + e); grad y ⊙ (g − Σ g y)
    const double e = std::exp(1.0), y0 = 1.0 / (1.0 + e), y1 = e / (1.0 + e), dot = y0 + 2.0 * y1;
    CHECK(y.value()(2, 0) == doctest::Approx(y0).epsilon(1e-14));
    CHECK(y.value()(2, 1) == doctest::Approx(y1).epsilon(1e-14));
    CHECK(y.value()(2, 2) == 0.0);
    CHECK(x.grad()(2, 0) == doctest::Approx(y0 * (1.0 - dot)).epsilon(1e-14));
    CHECK(x.grad()(2, 1) == doctest::Approx(y1 * (2.0 - dot)).epsilon(1e-14));
    CHECK(x.grad()(2, 2) == 0.0);
    tape().clear();
}

TEST_CASE("softmax whose output needs no grad holds no reference to its input") {
    auto x = parameter(randn<2>({2, 3}, 21));
    {
        NoGrad ng;
        auto y = softmax(x, -1);
        auto m = masked_softmax(x, causal);
        CHECK(x.node_ptr().use_count() == 1);
        CHECK(m.value()(0, 1) == 0.0);
        CHECK(y.value()(0, 0) == doctest::Approx(std::exp(x.value()(0, 0)) /
                                                 (std::exp(x.value()(0, 0)) + std::exp(x.value()(0, 1)) +
                                                  std::exp(x.value()(0, 2)))));
    }
    auto c = constant(x.value());
    auto z = log_softmax(c, 0);
    CHECK(c.node_ptr().use_count() == 1);
    auto y = softmax(x, -1);
    CHECK(x.node_ptr().use_count() == 2);  // recorded: backward needs x
    tape().clear();
}

TEST_CASE("causal masking is top-left aligned for L != S") {
    // tril(ones(L, S)): row i keeps keys 0..i
    auto wide = masked_softmax(constant(T2(xt::zeros<double>({2, 3}))), causal).value();
    CHECK(max_abs_diff(wide, T2{{1.0, 0.0, 0.0}, {0.5, 0.5, 0.0}}) < 1e-15);
    auto tall = masked_softmax(constant(T2(xt::zeros<double>({3, 2}))), causal).value();
    CHECK(max_abs_diff(tall, T2{{1.0, 0.0}, {0.5, 0.5}, {0.5, 0.5}}) < 1e-15);
    auto scaled = masked_softmax(constant(T2(xt::zeros<double>({3, 2}))) * 4.0, causal).value();  // an expression
    CHECK(max_abs_diff(scaled, tall) == 0.0);
    // valid_lens larger than S keep every key (as d2l)
    auto all = masked_softmax(constant(T3(xt::zeros<double>({1, 1, 2}))), valid_lens(xt::xtensor<int, 1>{7})).value();
    CHECK(all(0, 0, 1) == 0.5);
}

TEST_CASE("AnyMask: copies share the entries, an empty mask holds none, masked_softmax reads it as its kind") {
    const AnyMask<double> none;
    CHECK_FALSE(none);
    CHECK(none.bools().size() == 1);  // the empty default entries, never a mask's
    const AnyMask<double> pad = ignore_mask(B2{{false, true, false}});
    const AnyMask<double> copy = pad;  // shared, not copied: passing masks on allocates nothing
    CHECK(copy);
    CHECK(&copy.bools() == &pad.bools());
    CHECK(copy.kind() == MaskKind::ignore);
    CHECK(std::string(copy.name()) == "ignore_mask");
    const auto w = masked_softmax(constant(T2(xt::zeros<double>({1, 3}))), copy).value();
    CHECK(max_abs_diff(w, T2{{0.5, 0.0, 0.5}}) < 1e-15);
    AnyMask<double> reassigned = copy;
    reassigned = additive_mask(T2{{0.0, 0.0, std::log(2.0)}});  // the others keep theirs
    CHECK(reassigned.kind() == MaskKind::additive);
    CHECK(pad.bools() == B2{{false, true, false}});
    const auto v = masked_softmax(constant(T2(xt::zeros<double>({1, 3}))), reassigned).value();
    CHECK(max_abs_diff(v, T2{{0.25, 0.25, 0.5}}) < 1e-15);
}

TEST_CASE("softmax errors name the op and the shapes") {
    auto x = constant(randn<3>({2, 3, 4}, 13));
    CHECK_THROWS_WITH_AS(softmax(x, 3), "softmax: axis 3 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(log_softmax(x, -4), "log_softmax: axis -4 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, ignore_mask(B2(xt::zeros<bool>({3, 5})))),
                         "masked_softmax: ignore_mask of shape (3, 5) does not broadcast to the scores of shape "
                         "(2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, keep_mask(B3(xt::zeros<bool>({3, 3, 4})))),
                         doctest::Contains("keep_mask of shape (3, 3, 4)"), shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, additive_mask(T1(xt::zeros<double>({5})))),
                         doctest::Contains("additive_mask of shape (5,) does not broadcast"), shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(xt::xtensor<int, 1>{1, 2, 3})),
                         "masked_softmax: valid_lens of shape (3,) must equal the leading axes of the scores of "
                         "shape (2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(xt::xtensor<int, 2>{{1, 2}, {3, 4}})),
                         doctest::Contains("valid_lens of shape (2, 2)"), shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(xt::xtensor<int, 1>{2, -1})),
                         "masked_softmax: valid_lens holds a negative length -1", value_error);
    // a failed call records nothing
    auto p = parameter(randn<2>({2, 3}, 14));
    const std::size_t before = tape().size();
    CHECK_THROWS_AS(masked_softmax(p, ignore_mask(B2(xt::zeros<bool>({2, 2})))), shape_error);
    CHECK(tape().size() == before);
}

}  // namespace test_ops_softmax
