// Tests for matmul and linear: hand-computed values, plain-loop references, errors (gradchecks:
// checks/linalg.cpp).
#include <doctest/doctest.h>

#include <limits>
#include <type_traits>
#include <vector>

#include <xtensor/xview.hpp>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_linalg {

using xgrad::constant;
using xgrad::parameter;
using xgrad::randn;
using S2 = std::array<std::size_t, 2>;
using S3 = std::array<std::size_t, 3>;
using S4 = std::array<std::size_t, 4>;

namespace {

// Plain-loop reference: y (R, N) = a (R, K) · b (K, N) on raw row-major data.
template <class T>
std::vector<T> loop_matmul(const T* a, const T* b, std::size_t r, std::size_t k, std::size_t n) {
    std::vector<T> y(r * n, T(0));
    for (std::size_t i = 0; i < r; ++i)
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < k; ++c) y[i * n + j] += a[i * k + c] * b[c * n + j];
    return y;
}

template <class A, class V>
void check_close(const A& actual, const V& expected, double tol) {
    REQUIRE(actual.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i)
        CHECK(double(actual.data()[i]) == doctest::Approx(double(expected[i])).epsilon(tol));
}

}  // namespace

TEST_CASE_TEMPLATE("matmul 2-D: hand-computed values and gradients", T, float, double) {
    auto a = parameter(xt::xtensor<T, 2>{{1, 2, 3}, {4, 5, 6}});
    auto b = parameter(xt::xtensor<T, 2>{{7, 8}, {9, 10}, {11, 12}});
    auto y = xgrad::matmul(a, b);
    static_assert(std::same_as<decltype(y), xgrad::Var<T, 2>>);
    CHECK(y.value() == xt::xtensor<T, 2>{{58, 64}, {139, 154}});
    CHECK(std::string(y.op_name()) == "matmul");
    xgrad::backward(y, xt::xtensor<T, 2>(xt::ones<T>(S2{2, 2})));
    // dA = 1 · Bᵀ: every row holds B's row sums; dB = Aᵀ · 1: every column holds A's column sums
    CHECK(a.grad() == xt::xtensor<T, 2>{{15, 19, 23}, {15, 19, 23}});
    CHECK(b.grad() == xt::xtensor<T, 2>{{5, 5}, {7, 7}, {9, 9}});
    xgrad::tape().clear();
}

TEST_CASE_TEMPLATE("matmul batched equals per-slice 2-D matmul", T, float, double) {
    const xt::xtensor<T, 3> av = randn<3>(S3{3, 2, 4}, 1), bv = randn<3>(S3{3, 4, 5}, 2);
    auto y = xgrad::matmul(constant(av), constant(bv));
    REQUIRE(y.shape() == S3{3, 2, 5});
    CHECK_FALSE(y.requires_grad());
    for (std::size_t i = 0; i < 3; ++i) {
        const xt::xtensor<T, 2> ai = xt::view(av, i), bi = xt::view(bv, i);
        const xt::xtensor<T, 2> yi = xt::view(y.value(), i);
        CHECK(yi == xgrad::matmul(constant(ai), constant(bi)).value());
        check_close(yi, loop_matmul(ai.data(), bi.data(), 2, 4, 5), 1e-5);
    }
}

TEST_CASE_TEMPLATE("matmul rank 4 against plain loops per slice", T, float, double) {
    const xt::xtensor<T, 4> av = randn<4>(S4{2, 3, 2, 4}, 3), bv = randn<4>(S4{2, 3, 4, 3}, 4);
    auto y = xgrad::matmul(constant(av), constant(bv));
    REQUIRE(y.shape() == S4{2, 3, 2, 3});
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 3; ++j) {
            const xt::xtensor<T, 2> ai = xt::view(av, i, j), bi = xt::view(bv, i, j);
            const xt::xtensor<T, 2> yi = xt::view(y.value(), i, j);
            check_close(yi, loop_matmul(ai.data(), bi.data(), 2, 4, 3), 1e-5);
        }
}

TEST_CASE_TEMPLATE("matmul folded (3-D · 2-D) equals per-slice 2-D matmul", T, float, double) {
    const xt::xtensor<T, 3> av = randn<3>(S3{2, 3, 4}, 5);
    const xt::xtensor<T, 2> bv = randn<2>(S2{4, 5}, 6);
    auto y = xgrad::matmul(constant(av), constant(bv));
    REQUIRE(y.shape() == S3{2, 3, 5});
    check_close(y.value(), loop_matmul(av.data(), bv.data(), 6, 4, 5), 1e-5);
    for (std::size_t i = 0; i < 2; ++i) {
        const xt::xtensor<T, 2> ai = xt::view(av, i);
        const xt::xtensor<T, 2> yi = xt::view(y.value(), i);
        CHECK(yi == xgrad::matmul(constant(ai), constant(bv)).value());
    }
}

TEST_CASE_TEMPLATE("linear equals x·Wᵀ + b computed with loops", T, float, double) {
    const xt::xtensor<T, 3> xv = randn<3>(S3{2, 3, 4}, 7);
    const xt::xtensor<T, 2> wv = randn<2>(S2{5, 4}, 8);
    const xt::xtensor<T, 1> bv = randn<1>({5}, 9);
    auto y = xgrad::linear(constant(xv), constant(wv), constant(bv));
    auto y0 = xgrad::linear(constant(xv), constant(wv));
    REQUIRE(y.shape() == S3{2, 3, 5});
    REQUIRE(y0.shape() == S3{2, 3, 5});
    std::vector<T> ref(6 * 5), ref0(6 * 5);
    for (std::size_t r = 0; r < 6; ++r)
        for (std::size_t o = 0; o < 5; ++o) {
            T s = 0;
            for (std::size_t c = 0; c < 4; ++c) s += xv.data()[r * 4 + c] * wv(o, c);
            ref0[r * 5 + o] = s;
            ref[r * 5 + o] = s + bv(o);
        }
    check_close(y.value(), ref, 1e-5);
    check_close(y0.value(), ref0, 1e-5);
    CHECK(std::string(y.op_name()) == "linear");
}

TEST_CASE_TEMPLATE("linear with relu or a gelu in one node equals the activation of linear, values and gradients", T,
                   float, double) {
    using xgrad::LinearActivation;
    const xt::xtensor<T, 3> xv = randn<3>(S3{3, 4, 6}, 40), gv = randn<3>(S3{3, 4, 5}, 41);
    const xt::xtensor<T, 2> wv = randn<2>(S2{5, 6}, 42);
    const xt::xtensor<T, 1> bv = randn<1>({5}, 43);
    for (const auto act : {LinearActivation::relu, LinearActivation::gelu, LinearActivation::gelu_tanh}) {
        auto x1 = parameter(xv), x2 = parameter(xv);
        auto w1 = parameter(wv), w2 = parameter(wv);
        auto b1 = parameter(bv), b2 = parameter(bv);
        auto fused = xgrad::linear(x1, w1, b1, act);
        const auto plain_pre = xgrad::linear(x2, w2, b2);
        xgrad::Var<T, 3> plain = act == LinearActivation::relu   ? xgrad::Var<T, 3>(xgrad::relu(plain_pre))
                                 : act == LinearActivation::gelu ? xgrad::Var<T, 3>(xgrad::gelu(plain_pre))
                                                                 : xgrad::Var<T, 3>(xgrad::gelu_tanh(plain_pre));
        CHECK(std::string(fused.op_name()) == (act == LinearActivation::relu   ? "linear_relu"
                                               : act == LinearActivation::gelu ? "linear_gelu"
                                                                               : "linear_gelu_tanh"));
        std::size_t zeros = 0;
        for (T v : fused.value()) zeros += v == 0;
        if (act == LinearActivation::relu) CHECK(zeros > 0);  // the relu cut something
        // relu: the same values; the gelus: linear's node runs erf and tanh a SIMD vector at a time
        // (xsimd), the elementwise op the scalar std:: functions: within a few ulps
        if (act == LinearActivation::relu) CHECK(fused.value() == plain.value());
        else check_close(fused.value(), std::vector<T>(plain.value().begin(), plain.value().end()),
                         std::is_same_v<T, float> ? 1e-6 : 1e-14);
        xgrad::backward(fused, gv);
        xgrad::backward(plain, gv);
        const auto flat = [](const auto& a) { return std::vector<T>(a.begin(), a.end()); };
        check_close(x1.grad(), flat(x2.grad()), 1e-6);
        check_close(w1.grad(), flat(w2.grad()), 1e-6);
        check_close(b1.grad(), flat(b2.grad()), 1e-6);
        xgrad::tape().clear();
    }
}

TEST_CASE("linear on a rank-1 input, hand-computed") {
    auto x = parameter(xt::xtensor<double, 1>{1, 2});
    auto w = parameter(xt::xtensor<double, 2>{{1, 0}, {2, 3}, {-1, 1}});
    auto b = parameter(xt::xtensor<double, 1>{10, 20, 30});
    auto y = xgrad::linear(x, w, b);
    static_assert(std::same_as<decltype(y), xgrad::Var<double, 1>>);
    CHECK(y.value() == xt::xtensor<double, 1>{11, 28, 31});
    xgrad::backward(y, xt::xtensor<double, 1>{1, 2, 3});
    CHECK(x.grad() == xt::xtensor<double, 1>{1 + 4 - 3, 0 + 6 + 3});  // dX = dY · W
    CHECK(w.grad() == xt::xtensor<double, 2>{{1, 2}, {2, 4}, {3, 6}});  // dW = dYᵀ · x
    CHECK(b.grad() == xt::xtensor<double, 1>{1, 2, 3});
    xgrad::tape().clear();
}

TEST_CASE_TEMPLATE("linear's bias gradient sums dY over the rows, and accumulates over two uses", T, float, double) {
    // 70 outputs: whole blocks of 4 vectors of columns and a partial one, in float and double
    const std::size_t rows = 5, in = 3, out = 70;
    const auto x = constant(xt::xtensor<T, 2>(randn<2>(S2{rows, in}, 31)));
    const auto w = constant(xt::xtensor<T, 2>(randn<2>(S2{out, in}, 32)));
    const auto b = parameter(xt::xtensor<T, 1>(randn<1>({out}, 33)));
    const auto y = xgrad::concat(std::vector<xgrad::Var<T, 2>>{xgrad::linear(x, w, b), xgrad::linear(x, w, b)}, 0);
    const xt::xtensor<T, 2> seed = randn<2>(S2{2 * rows, out}, 34);
    xgrad::backward(y, seed);
    for (std::size_t o = 0; o < out; ++o) {
        double expected = 0;
        for (std::size_t r = 0; r < 2 * rows; ++r) expected += double(seed(r, o));
        CHECK(double(b.grad()(o)) == doctest::Approx(expected).epsilon(1e-5));
    }
    xgrad::tape().clear();
}

TEST_CASE("matmul and linear send no gradient to constants") {
    auto a = parameter(xt::xtensor<double, 2>{{1, 2}, {3, 4}});
    auto b = constant(xt::xtensor<double, 2>{{1, 1}, {0, 1}});
    auto y = xgrad::matmul(a, b);
    CHECK(y.requires_grad());
    xgrad::backward(xgrad::sum(y));
    CHECK(a.grad() == xt::xtensor<double, 2>{{2, 1}, {2, 1}});
    CHECK_FALSE(b.has_grad());
    xgrad::tape().clear();

    auto w = parameter(xt::xtensor<double, 2>{{1, 2}});
    auto bias = constant(xt::xtensor<double, 1>{5});
    auto z = xgrad::linear(b, w, bias);  // rows of b: (1, 1) and (0, 1)
    CHECK(z.value() == xt::xtensor<double, 2>{{8}, {7}});
    xgrad::backward(xgrad::sum(z));
    CHECK(w.grad() == xt::xtensor<double, 2>{{1, 2}});
    CHECK_FALSE(bias.has_grad());
    xgrad::tape().clear();
}

TEST_CASE("matmul reuses a tape slot across steps with a new shape, and handles K = 0") {
    auto b = parameter(xt::xtensor<double, 2>{{1, 0}, {0, 1}});
    for (std::size_t rows : {2u, 3u}) {
        xt::xtensor<double, 2> av = xt::ones<double>(S2{rows, 2});
        auto y = xgrad::matmul(constant(av), b);
        CHECK(y.value() == av);
        xgrad::tape().clear();
    }
    auto y = xgrad::matmul(constant(xt::xtensor<double, 2>(S2{2, 0})), constant(xt::xtensor<double, 2>(S2{0, 3})));
    CHECK(y.value() == xt::xtensor<double, 2>(xt::zeros<double>(S2{2, 3})));
}

TEST_CASE("matmul and linear shape errors name the operands and shapes") {
    using xgrad::shape_error;
    auto a23 = constant(xt::xtensor<double, 2>(S2{2, 3}));
    auto b45 = constant(xt::xtensor<double, 2>(S2{4, 5}));
    CHECK_THROWS_WITH_AS(xgrad::matmul(a23, b45), "matmul: inner dimensions differ: a (2, 3) and b (4, 5)", shape_error);
    auto a3 = constant(xt::xtensor<double, 3>(S3{2, 3, 4}));
    auto b3 = constant(xt::xtensor<double, 3>(S3{3, 4, 5}));
    CHECK_THROWS_WITH_AS(xgrad::matmul(a3, b3), "matmul: batch dimensions differ: a (2, 3, 4) and b (3, 4, 5)",
                         shape_error);
    auto b3bad = constant(xt::xtensor<double, 3>(S3{2, 5, 5}));
    CHECK_THROWS_WITH_AS(xgrad::matmul(a3, b3bad), "matmul: inner dimensions differ: a (2, 3, 4) and b (2, 5, 5)",
                         shape_error);
    auto b52 = constant(xt::xtensor<double, 2>(S2{5, 2}));
    CHECK_THROWS_WITH_AS(xgrad::matmul(a3, b52), "matmul: inner dimensions differ: a (2, 3, 4) and b (5, 2)",
                         shape_error);

    auto w = constant(xt::xtensor<double, 2>(S2{5, 3}));
    CHECK_THROWS_WITH_AS(xgrad::linear(a3, w),
                         "linear: weight has shape (5, 3) but x has shape (2, 3, 4): expected weight (out, 4)",
                         shape_error);
    auto w54 = constant(xt::xtensor<double, 2>(S2{5, 4}));
    auto bias = constant(xt::xtensor<double, 1>(std::array<std::size_t, 1>{4}));
    CHECK_THROWS_WITH_AS(xgrad::linear(a3, w54, bias),
                         "linear: bias has shape (4,) but weight has shape (5, 4): expected bias (5,)", shape_error);
    CHECK(xgrad::tape().size() == 0);  // nothing recorded by failed calls
}

TEST_CASE("matmul and linear whose output needs no grad hold no reference to their inputs") {
    using D2 = xt::xtensor<double, 2>;
    auto a = parameter(D2{{1, 2}, {3, 4}});
    auto w = parameter(D2{{1, 0}, {1, 1}});
    auto bias = constant(xt::xtensor<double, 1>{10, 20});
    {
        xgrad::NoGrad ng;
        auto y = xgrad::matmul(a, w);
        auto z = xgrad::linear(a, w, bias);
        CHECK(a.node_ptr().use_count() == 1);
        CHECK(w.node_ptr().use_count() == 1);
        CHECK(bias.node_ptr().use_count() == 1);
        CHECK(y.value() == D2{{3, 2}, {7, 4}});
        CHECK(z.value() == D2{{11, 23}, {13, 27}});  // x · Wᵀ + b
    }
    // constants only: nothing requires grad, nothing is held either
    auto c = constant(D2{{1, 2}, {3, 4}});
    auto y = xgrad::matmul(c, c);
    auto z = xgrad::linear(c, c);
    CHECK(c.node_ptr().use_count() == 1);
    CHECK(y.value() == D2{{7, 10}, {15, 22}});
    CHECK(z.value() == D2{{5, 11}, {11, 25}});
    // with grad the inputs are held and backward still works
    auto zg = xgrad::linear(c, w, bias);
    CHECK(w.node_ptr().use_count() == 2);
    xgrad::backward(xgrad::sum(zg));
    CHECK(w.grad() == D2{{4, 6}, {4, 6}});  // dW = dYᵀ · X = column sums of c per output row
    xgrad::tape().clear();
}

// matmul and linear write a gradient BLAS-style: the first contribution in a pass overwrites the
// buffer kept from the last pass (never read: NaN there must not leak), later ones accumulate.
TEST_CASE("linear and matmul: the first gradient write of a pass overwrites stale content, later ones add") {
    using D1 = xt::xtensor<double, 1>;
    using D2 = xt::xtensor<double, 2>;
    auto x = parameter(D2{{1, 2}, {3, 4}, {5, 6}});  // (rows 3, in 2)
    auto w = parameter(D2{{1, 0}, {2, 1}});          // (out 2, in 2)
    auto b = parameter(D1{0.5, -1});
    const auto pass = [&] {
        // x and w each used by two linears and a matmul: three contributions to each gradient
        xgrad::Var<double, 0> loss = xgrad::sum(xgrad::linear(x, w, b)) + xgrad::sum(xgrad::linear(x, w)) +
                                     xgrad::sum(xgrad::matmul(x, w));
        xgrad::backward(loss);
        xgrad::tape().clear();
    };
    pass();
    for (auto* v : {&x, &w})  // stale gradients from the last pass, poisoned
        const_cast<D2&>(v->grad()).fill(std::numeric_limits<double>::quiet_NaN());
    const_cast<D1&>(b.grad()).fill(std::numeric_limits<double>::quiet_NaN());
    x.zero_grad(), w.zero_grad(), b.zero_grad();
    pass();
    // d sum(x·Wᵀ)/dx = row sums... each row of dX is Σ_o W[o, :] (twice) plus Σ_n W[:, n] (matmul)
    CHECK(x.grad() == D2{{2 * 3 + 1, 2 * 1 + 3}, {7, 5}, {7, 5}});
    // dW[o, i] = Σ_r x[r, i] twice (linears); matmul: dW[k, n] = Σ_r x[r, k]
    CHECK(w.grad() == D2{{2 * 9 + 9, 2 * 12 + 9}, {2 * 9 + 12, 2 * 12 + 12}});
    CHECK(b.grad() == D1{3, 3});  // one per row
    pass();  // no zero_grad: accumulates
    CHECK(b.grad() == D1{6, 6});
    CHECK(w.grad()(0, 0) == 2 * 27);
}

}  // namespace test_ops_linalg
