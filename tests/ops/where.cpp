// where and masked_fill: torch's values (by hand), broadcasting, -inf fills, gradients only through
// the selected operand, the torch idioms of docs/masking.md, errors (gradchecks:
// checks/elementwise.cpp).
#include <cmath>
#include <limits>

#include <doctest/doctest.h>
#include <xtensor/xoperation.hpp>
#include <xtensor/xview.hpp>

#include "xgrad/xgrad.hpp"

namespace test_ops_where {

using namespace xgrad;
using T1 = xt::xtensor<double, 1>;
using T2 = xt::xtensor<double, 2>;
using B2 = xt::xtensor<bool, 2>;
constexpr double inf = std::numeric_limits<double>::infinity();

TEST_CASE("where: a where cond, else b, broadcast; the gradient reaches only the operand taken") {
    const B2 cond = {{true, false, true}, {false, false, true}};
    auto a = parameter(T2{{1, 2, 3}, {4, 5, 6}});
    auto b = parameter(T1{10, 20, 30});  // (3,) broadcast over the rows
    Var<double, 2> y = where(cond, a, b);
    CHECK(y.value() == T2{{1, 20, 3}, {10, 20, 6}});
    backward(sum(y * constant(T2{{1, 2, 3}, {4, 5, 6}})));
    CHECK(a.grad() == T2{{1, 0, 3}, {0, 0, 6}});
    CHECK(b.grad() == T1{4, 2 + 5, 0});  // summed over the broadcast rows where b was taken
    tape().clear();
}

TEST_CASE("where with a scalar operand and a condition expression (mask == 0)") {
    const xt::xtensor<long, 2> mask = {{1, 0}, {0, 1}};
    auto x = parameter(T2{{1, 2}, {3, 4}});
    Var<double, 2> y = where(xt::equal(mask, 0L), 0.0, x);
    CHECK(y.value() == T2{{1, 0}, {0, 4}});
    backward(sum(y));
    CHECK(x.grad() == T2{{1, 0}, {0, 1}});
    tape().clear();
}

TEST_CASE("masked_fill(-inf) then softmax: torch's att.masked_fill(mask == 0, float('-inf')); masked weights and gradients 0") {
    const xt::xtensor<double, 2> scores = {{0.5, 1.5, -1.0}, {2.0, 0.0, 1.0}};
    const xt::xtensor<int, 2> causal = {{1, 0, 0}, {1, 1, 0}};  // nanoGPT's tril buffer
    auto s = parameter(scores);
    Var<double, 2> p = softmax(masked_fill(s, xt::equal(causal, 0), -inf), -1);
    CHECK(p.value()(0, 0) == 1.0);
    CHECK(p.value()(0, 1) == 0.0);
    CHECK(p.value()(1, 0) == doctest::Approx(std::exp(2.0) / (std::exp(2.0) + 1.0)).epsilon(1e-15));
    CHECK(p.value()(1, 2) == 0.0);
    backward(sum(p * constant(T2{{1, 2, 3}, {4, 5, 6}})));
    CHECK(s.grad()(0, 1) == 0.0);
    CHECK(s.grad()(1, 2) == 0.0);
    CHECK(std::abs(s.grad()(1, 0)) > 0.1);  // the live entries do get a gradient
    CHECK(xt::all(xt::isfinite(s.grad())));
    tape().clear();
}

TEST_CASE("masked_fill(-10000) over a whole row: torch's uniform row, where xgrad's own masks give zeros") {
    const T2 scores = {{0.5, 1.5, -1.0}, {2.0, 0.0, 1.0}};
    const B2 pad = {{false, false, true}, {true, true, true}};  // row 1: every key masked
    auto s = parameter(scores);
    Var<double, 2> p = softmax(masked_fill(s, pad, -10000.0), -1);
    for (std::size_t j = 0; j < 3; ++j) CHECK(p.value()(1, j) == doctest::Approx(1.0 / 3).epsilon(1e-15));
    CHECK(p.value()(0, 2) == 0.0);  // exp(-10000 - max) underflows to 0, as in torch
    // xgrad's ignore mask on the same row: zero weights (no NaN, no uniform row).
    Var<double, 2> q = masked_softmax(s, ignore_mask(pad));
    for (std::size_t j = 0; j < 3; ++j) CHECK(q.value()(1, j) == 0.0);
    // The trap of docs/masking.md: an additive -1e6 over the whole row is no mask at all.
    const T2 bias = xt::where(pad, -1e6, 0.0);
    Var<double, 2> added = masked_softmax(s, additive_mask(bias));
    Var<double, 2> plain = softmax(s, -1);
    for (std::size_t j = 0; j < 3; ++j) CHECK(added.value()(1, j) == doctest::Approx(plain.value()(1, j)).epsilon(1e-9));
    tape().clear();
}

TEST_CASE("masked_fill: the mask broadcasts to the tensor's shape, not beyond; the condition must be bool") {
    auto x = parameter(T2{{1, 2, 3}});  // (1, 3)
    const B2 wide = {{true, false, false}, {false, true, false}};  // (2, 3): would enlarge x
    CHECK_THROWS_WITH_AS((void)masked_fill(x, wide, 0.0), "masked_fill: the mask (2, 3) does not broadcast to the filled tensor's shape (1, 3)",
                         shape_error);
    const xt::xtensor<bool, 1> row = {false, true, false};  // (3,): broadcast over the rows
    Var<double, 2> y = masked_fill(x, row, 7.0);
    CHECK(y.value() == T2{{1, 7, 3}});
    tape().clear();
}

}  // namespace test_ops_where
