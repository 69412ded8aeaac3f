// Views: a shape op that reads every element where it already is (reshape; a permute, transpose or
// expand that moves or adds only axes of extent 1) holds its input's buffer, as a PyTorch view;
// every other shape op copies. What a view shares, what it never shares (a node the tape reuses,
// a copy of its value), and its gradient.
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

namespace test_ops_shape_views {

using namespace xgrad;

namespace {
using D1 = xt::xtensor<double, 1>;
using D2 = xt::xtensor<double, 2>;
using D3 = xt::xtensor<double, 3>;
}  // namespace

TEST_CASE("reshape and the identity cases of permute, transpose, expand and slice are views") {
    auto x = parameter(D2{{0, 1, 2}, {3, 4, 5}});
    const double* buffer = x.value().data();
    CHECK(reshape(x, {6}).value().data() == buffer);
    CHECK(reshape<3>(x, {3, 1, 2}).value().data() == buffer);
    auto column = reshape<3>(x, {2, 3, 1});
    CHECK(permute(column, {0, 2, 1}).value().data() == buffer);  // (2, 1, 3): moves only the axis of 1
    CHECK(permute(column, {1, 0, 2}).value().data() != buffer);  // (3, 2, 1): a transpose, copied
    CHECK(permute(column, {1, 0, 2}).value() == D3{{{0}, {3}}, {{1}, {4}}, {{2}, {5}}});
    CHECK(transpose(reshape<3>(x, {2, 1, 3}), 0, 1).value().data() == buffer);
    CHECK(expand<3>(reshape<3>(x, {1, 2, 3}), {1, 2, 3}).value().data() == buffer);
    CHECK(slice(x, 1, 0, 3).value().data() == buffer);
    CHECK(slice(x, 1, 0, 2).value().data() != buffer);  // a part of each row: a copy
    CHECK(transpose(x, 0, 1).value().data() != buffer);
    CHECK(transpose(x, 0, 1).value() == D2{{0, 3}, {1, 4}, {2, 5}});
    CHECK(reshape(x, {6}).op_name() == std::string("reshape"));
    // the empty and the one-element cases
    CHECK(reshape(constant(D1{}), {0L, 3L}).size() == 0);
    auto one = constant(D1{7});
    CHECK(reshape<0>(one, std::array<long, 0>{}).value().data() == one.value().data());
    CHECK(reshape<0>(one, std::array<long, 0>{}).value()() == 7);
}

TEST_CASE("a view sees writes to its input's value, as in PyTorch; a copy of its value does not") {
    auto w = parameter(D2{{1, 2}, {3, 4}});
    auto flat = [&] {
        NoGrad no_grad;
        return reshape(w, {4});
    }();
    w.value()(1, 0) = 30;  // a write in place
    CHECK(flat.value() == D1{1, 2, 30, 4});
    auto copy = flat.value();  // an owning copy of the elements
    copy(0) = -1;
    CHECK(w.value()(0, 0) == 1);
    xt::xtensor<double, 1> converted = flat.value();
    converted(1) = -2;
    CHECK(w.value()(0, 1) == 2);
    w.value() *= 2.0;  // in place: shows through
    CHECK(flat.value() == D1{2, 4, 60, 8});
    w.value() = w.value() * 0.5;  // a new buffer for w: the view keeps the old one
    CHECK(flat.value() == D1{2, 4, 60, 8});
    CHECK(w.value()(1, 0) == 30);
}

TEST_CASE("an optimizer step shows through a view of the parameter, as in PyTorch") {
    Generator gen(3);
    nn::Linear<double> lin(3, 2, gen, false);
    optim::SGD opt(lin, {.lr = 0.5});
    const D2 before = lin.weight.value();
    auto flat = [&] {
        NoGrad no_grad;
        return reshape(lin.weight, {6});
    }();
    backward(sum(reshape(lin.weight, {6}) * constant(D1{1, 2, 3, 4, 5, 6})));
    opt.step();  // w -= 0.5 · dL/dw
    for (std::size_t i = 0; i < 6; ++i) CHECK(flat.value()(i) == doctest::Approx(before.data()[i] - 0.5 * double(i + 1)));
}

TEST_CASE("the gradient through a view: dX += dY in x's shape, beside x's other uses") {
    auto x = parameter(D2{{1, 2, 3}, {4, 5, 6}});
    auto v = reshape<3>(x, {3, 2, 1});
    Var<double, 0> loss = sum(v * v) + sum(x * 3.0);  // dL/dx = 2x + 3
    backward(loss);
    CHECK(x.grad() == D2{{5, 7, 9}, {11, 13, 15}});
    CHECK(v.grad() == D3{{{2}, {4}}, {{6}, {8}}, {{10}, {12}}});
    // only the view reaches x: its gradient is copied, not added to stale values
    x.zero_grad();
    backward(sum(reshape(x, {6}) * 2.0));
    CHECK(x.grad() == D2{{2, 2, 2}, {2, 2, 2}});
}

TEST_CASE("a backward that gives gradients back hands a view's gradient buffer to its input, same values") {
    auto x = parameter(D2{{1, 2, 3}, {4, 5, 6}});
    // h = 2x; loss = sum(h²) + sum(3·view(h)) (+ sum(h) recorded after the view, which reaches h
    // first in backward: the view then adds). dL/dh = 2h + 3 (+ 1), dL/dx = 2 dL/dh.
    auto gradient = [&](bool keep, bool use_after_view) {
        x.zero_grad();
        Var<double, 2> h = x * 2.0;
        auto loss = sum(h * h);
        loss = loss + sum(reshape<3>(h, {3, 2, 1}) * 3.0);
        if (use_after_view) loss = loss + sum(h);
        backward(loss, BackwardOptions{.keep_intermediate_grads = keep});
        return D2(x.grad());
    };
    for (bool use_after_view : {false, true}) {
        const double extra = use_after_view ? 2 : 0;
        const D2 expected = D2{{14, 22, 30}, {38, 46, 54}} + extra;
        CHECK(gradient(true, use_after_view) == expected);
        CHECK(gradient(false, use_after_view) == expected);
    }
    // the parameter itself viewed: its gradient is the view's buffer, read in its own shape
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
    // keeping gradients: the view's stays readable, x's gradient is written into x's own buffer
    const double* own = step(true);
    x.zero_grad();
    CHECK(step(true) == own);
    // giving them back: x's gradient is the view's buffer (x's old one goes to the pool)
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

TEST_CASE("the tape's reuse never writes a buffer a held view shares, and a steady step reallocates nothing") {
    Tape t;
    TapeScope scope(t);
    auto w = parameter(D2{{1, 2}, {3, 4}});
    auto step = [&](double k) {
        Var<double, 2> h = w * k;     // reused node each step
        auto flat = reshape(h, {4});  // its view
        backward(sum(flat * flat));
        return std::pair{h.value().data(), flat};
    };
    const double* first = step(2.0).first;
    t.clear();
    auto [second, flat] = step(3.0);
    CHECK(first == second);  // the unheld view let go of h's buffer at clear(): h writes its own again
    CHECK(flat.value().data() == second);
    // the user keeps `flat`: the next step's h must not write the buffer it shows
    t.clear();
    const double* third = step(5.0).first;
    CHECK(third != second);
    CHECK(flat.value() == D1{3, 6, 9, 12});
    t.clear();
    CHECK(step(7.0).second.value() == D1{7, 14, 21, 28});
}

}  // namespace test_ops_shape_views
