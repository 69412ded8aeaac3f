// Shape ops whose map is the identity (reshape; a permute, transpose or expand that moves or adds
// only axes of extent 1; a full slice): one flat copy forward, and a backward that hands its
// gradient's buffer to its input when gradients are given back. Every op's value is an array of its
// own: a write to one never shows in another.
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

namespace test_ops_shape_views {

using namespace xgrad;

namespace {
using D1 = xt::xtensor<double, 1>;
using D2 = xt::xtensor<double, 2>;
using D3 = xt::xtensor<double, 3>;
}  // namespace

TEST_CASE("reshape and the identity cases of permute, transpose, expand and slice copy the elements in order") {
    auto x = parameter(D2{{0, 1, 2}, {3, 4, 5}});
    CHECK(reshape(x, {6}).value() == D1{0, 1, 2, 3, 4, 5});
    CHECK(reshape(x, {6}).value().data() != x.value().data());
    CHECK(reshape<3>(x, {3, 1, 2}).value() == D3{{{0, 1}}, {{2, 3}}, {{4, 5}}});
    auto column = reshape<3>(x, {2, 3, 1});
    CHECK(permute(column, {0, 2, 1}).value() == D3{{{0, 1, 2}}, {{3, 4, 5}}});  // moves only the axis of 1
    CHECK(permute(column, {1, 0, 2}).value() == D3{{{0}, {3}}, {{1}, {4}}, {{2}, {5}}});  // a transpose
    CHECK(transpose(reshape<3>(x, {2, 1, 3}), 0, 1).value() == D3{{{0, 1, 2}, {3, 4, 5}}});
    CHECK(expand<3>(reshape<3>(x, {1, 2, 3}), {1, 2, 3}).value() == D3{{{0, 1, 2}, {3, 4, 5}}});
    CHECK(slice(x, 1, 0, 3).value() == x.value());
    CHECK(slice(x, 1, 0, 2).value() == D2{{0, 1}, {3, 4}});
    CHECK(transpose(x, 0, 1).value() == D2{{0, 3}, {1, 4}, {2, 5}});
    CHECK(reshape(x, {6}).op_name() == std::string("reshape"));
    // the empty and the one-element cases
    CHECK(reshape(constant(D1{}), {0L, 3L}).size() == 0);
    auto one = constant(D1{7});
    CHECK(reshape<0>(one, std::array<long, 0>{}).value()() == 7);
}

TEST_CASE("a reshape's value is its own: writes to the input do not show in it, nor the other way") {
    auto w = parameter(D2{{1, 2}, {3, 4}});
    auto flat = [&] {
        NoGrad no_grad;
        return reshape(w, {4});
    }();
    w.value()(1, 0) = 30;
    w.value() *= 2.0;
    CHECK(flat.value() == D1{1, 2, 3, 4});
    flat.value()(0) = -1;
    CHECK(w.value() == D2{{2, 4}, {60, 8}});
}

TEST_CASE("the gradient through a reshape: dX += dY in x's shape, beside x's other uses") {
    auto x = parameter(D2{{1, 2, 3}, {4, 5, 6}});
    auto v = reshape<3>(x, {3, 2, 1});
    Var<double, 0> loss = sum(v * v) + sum(x * 3.0);  // dL/dx = 2x + 3
    backward(loss);
    CHECK(x.grad() == D2{{5, 7, 9}, {11, 13, 15}});
    CHECK(v.grad() == D3{{{2}, {4}}, {{6}, {8}}, {{10}, {12}}});
    // only the reshape reaches x: its gradient is copied, not added to stale values
    x.zero_grad();
    backward(sum(reshape(x, {6}) * 2.0));
    CHECK(x.grad() == D2{{2, 2, 2}, {2, 2, 2}});
}

TEST_CASE("a backward that gives gradients back hands a reshape's gradient buffer to its input, same values") {
    auto x = parameter(D2{{1, 2, 3}, {4, 5, 6}});
    // h = 2x; loss = sum(h²) + sum(3·reshape(h)) (+ sum(h) recorded after the reshape, which reaches
    // h first in backward: the reshape then adds). dL/dh = 2h + 3 (+ 1), dL/dx = 2 dL/dh.
    auto gradient = [&](bool keep, bool use_after_reshape) {
        x.zero_grad();
        Var<double, 2> h = x * 2.0;
        auto loss = sum(h * h);
        loss = loss + sum(reshape<3>(h, {3, 2, 1}) * 3.0);
        if (use_after_reshape) loss = loss + sum(h);
        backward(loss, BackwardOptions{.keep_intermediate_grads = keep});
        return D2(x.grad());
    };
    for (bool use_after_reshape : {false, true}) {
        const double extra = use_after_reshape ? 2 : 0;
        const D2 expected = D2{{14, 22, 30}, {38, 46, 54}} + extra;
        CHECK(gradient(true, use_after_reshape) == expected);
        CHECK(gradient(false, use_after_reshape) == expected);
    }
    // the parameter itself reshaped: its gradient is the reshape's buffer, read in its own shape
    x.zero_grad();
    backward(sum(reshape(x, {6}) * constant(D1{1, 2, 3, 4, 5, 6})), BackwardOptions{.keep_intermediate_grads = false});
    CHECK(x.grad() == D2{{1, 2, 3}, {4, 5, 6}});
    CHECK(x.grad().shape() == std::array<std::size_t, 2>{2, 3});
}

TEST_CASE("the handover is a swap of buffers, not a copy; anomaly mode and accumulation keep it exact") {
    auto x = parameter(D2{{1, 2, 3}, {4, 5, 6}});
    const auto c = constant(D1{1, 2, 3, 4, 5, 6});
    auto step = [&](bool keep) {
        backward(sum(reshape(x, {6}) * c), BackwardOptions{.keep_intermediate_grads = keep});
        return x.grad().data();
    };
    // keeping gradients: the reshape's stays readable, x's gradient is written into x's own buffer
    const double* own = step(true);
    x.zero_grad();
    CHECK(step(true) == own);
    // giving them back: x's gradient is the reshape's buffer (x's old one goes to the pool)
    x.zero_grad();
    const double* handed = step(false);
    CHECK(handed != own);
    CHECK(x.grad() == D2{{1, 2, 3}, {4, 5, 6}});
    // no zero_grad: the next backward adds onto it (x's gradient is live: no handover)
    CHECK(step(false) == handed);
    CHECK(x.grad() == D2{{2, 4, 6}, {8, 10, 12}});
    // the same under anomaly mode's checked walk
    x.zero_grad();
    {
        DetectAnomaly anomaly;
        step(false);
    }
    CHECK(x.grad() == D2{{1, 2, 3}, {4, 5, 6}});
}

TEST_CASE("a steady step reuses the buffers of the reshape and of its input") {
    Tape t;
    TapeScope scope(t);
    auto w = parameter(D2{{1, 2}, {3, 4}});
    auto step = [&](double k) {
        Var<double, 2> h = w * k;     // reused node each step
        auto flat = reshape(h, {4});  // and its reshape
        backward(sum(flat * flat));   // dL/dw = 2k²w, added up over the steps
        return std::pair{h.value().data(), flat.value().data()};
    };
    const auto first = step(2.0);
    t.clear();
    const auto second = step(3.0);
    CHECK(first == second);
    CHECK(w.grad() == D2{{26, 52}, {78, 104}});
}

}  // namespace test_ops_shape_views
