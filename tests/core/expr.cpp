// Elementwise expressions: values, broadcasting, gradients by hand, errors.
#include <cmath>

#include <doctest/doctest.h>
#include <xtensor/xmath.hpp>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_core_expr {

using namespace xgrad;
using T1 = xt::xtensor<double, 1>;
using T2 = xt::xtensor<double, 2>;

TEST_CASE("unary ops match their scalar definitions") {
    auto x = constant(T1{-1.5, -0.2, 0.3, 2.0});
    auto at = [&](auto e, int i) { return eval(e).value()(i); };
    CHECK(at(exp(x), 3) == doctest::Approx(std::exp(2.0)));
    CHECK(at(abs(x), 0) == 1.5);
    CHECK(at(relu(x), 0) == 0.0);
    CHECK(at(relu(x), 2) == 0.3);
    CHECK(std::isnan(eval(relu(constant(T1{std::nan("")})) ).value()(0)));  // NaN propagates, as torch
    CHECK(at(square(x), 0) == doctest::Approx(2.25));
    CHECK(at(sigmoid(x), 3) == doctest::Approx(1 / (1 + std::exp(-2.0))));
    CHECK(at(-x, 1) == 0.2);
    CHECK(at(pow(abs(x), 3), 3) == doctest::Approx(8.0));
    // GELU reference values: x * Phi(x); Phi(2) = 0.9772498680518208, Phi(-1.5) = 0.0668072012688581
    CHECK(at(gelu(x), 3) == doctest::Approx(2 * 0.9772498680518208).epsilon(1e-14));
    CHECK(at(gelu(x), 0) == doctest::Approx(-1.5 * 0.0668072012688581).epsilon(1e-13));
    // tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const double u = std::sqrt(2 / 3.141592653589793) * (2.0 + 0.044715 * 8);
    CHECK(at(gelu_tanh(x), 3) == doctest::Approx(0.5 * 2 * (1 + std::tanh(u))).epsilon(1e-14));
}

// Every op's gradient, broadcast operands included, is checked by the registered gradchecks
// (checks/elementwise.cpp, walked by tests/check/registry.cpp).
TEST_CASE("binary ops broadcast like numpy") {
    // broadcast values: (3,1) * (1,4) is an outer product
    auto c = constant(T2{{1}, {2}, {3}});
    auto r = constant(T2{{10, 20}});
    CHECK(eval(c * r).value() == T2{{10, 20}, {20, 40}, {30, 60}});
}

// The loop (core/expr_loop.hpp) merges axes and steps broadcast operands by stride 0: every
// element and every summed gradient against plain index arithmetic, with broadcasting on a leading,
// a middle and the last axis, a scalar Var, and an empty tensor.
TEST_CASE("broadcast values and summed gradients match index arithmetic") {
    using T4 = xt::xtensor<double, 4>;
    using T3 = xt::xtensor<double, 3>;
    Tape t;
    TapeScope scope(t);
    T4 av = T4::from_shape({2, 1, 3, 1});
    T3 bv = T3::from_shape({4, 1, 5});
    T4 wv = T4::from_shape({2, 4, 3, 5});
    for (std::size_t i = 0; i < av.size(); ++i) av.data()[i] = 0.5 + double(i);
    for (std::size_t i = 0; i < bv.size(); ++i) bv.data()[i] = std::sin(double(i));
    for (std::size_t i = 0; i < wv.size(); ++i) wv.data()[i] = std::cos(0.7 * double(i));
    auto a = parameter(av);
    auto b = parameter(bv);
    auto s = parameter(xt::xtensor<double, 0>(2.0));
    const Var<double, 4> y = a * b + a * s;  // (2, 4, 3, 5); a used twice
    backward(sum(y * constant(wv)));
    T4 ga = xt::zeros<double>(av.shape());
    T3 gb = xt::zeros<double>(bv.shape());
    double gs = 0;
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 4; ++j)
            for (std::size_t k = 0; k < 3; ++k)
                for (std::size_t l = 0; l < 5; ++l) {
                    const double w = wv(i, j, k, l), x = av(i, 0, k, 0), z = bv(j, 0, l);
                    REQUIRE(y.value()(i, j, k, l) == x * z + x * 2.0);
                    ga(i, 0, k, 0) += w * (z + 2.0);
                    gb(j, 0, l) += w * x;
                    gs += w * x;
                }
    CHECK(xt::allclose(a.grad(), ga, 1e-13, 0));
    CHECK(xt::allclose(b.grad(), gb, 1e-13, 0));
    CHECK(s.grad()() == doctest::Approx(gs).epsilon(1e-13));
    CHECK(xt::amax(xt::abs(a.grad()))() > 0);

    auto empty = parameter(T2::from_shape({0, 3}));
    auto row = parameter(T1{1.0, 2.0, 3.0});
    const Var<double, 2> e = empty * row;
    CHECK(e.shape()[0] == 0);
    backward(sum(e));
    CHECK(row.grad() == T1{0.0, 0.0, 0.0});
}

TEST_CASE("a leaf used twice accumulates both paths") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T1{3.0, -2.0});
    backward(sum(x * x + x));  // d/dx = 2x + 1
    CHECK(x.grad() == T1{7.0, -3.0});
}

TEST_CASE("backward from a scalar expression of Vars: a loss written as a sum of terms") {
    auto x = parameter(T1{3.0, -2.0});
    auto y = parameter(T1{1.0, 2.0});
    backward(sum(x * x) + sum(x * y) * 2.0);  // d/dx = 2x + 2y, d/dy = 2x
    CHECK(x.grad() == T1{8.0, 0.0});
    CHECK(y.grad() == T1{6.0, -4.0});
}

TEST_CASE("float expressions compute in float") {
    auto a = constant(xt::xtensor<float, 1>{1.0f, 4.0f});
    Var<float, 1> y = sqrt(a) * 2.0;  // the double literal becomes a float constant
    CHECK(y.value()(1) == 4.0f);
}

// silu(x)·z + exp(−x/10) + tanh(x)·sigmoid(z) and its gradients against long-double formulas.
template <Real T>
void check_vector_loop(double tolerance) {
    using detail::by_vectors;
    Generator gen(3);
    xt::xtensor<T, 2> xv({3, 37}), zv({3, 37});  // rows of whole vectors and a partial last one
    for (auto& v : xv) v = T(gen.normal() * 4);
    for (auto& v : zv) v = T(gen.normal());
    xv(0, 0) = T(100), xv(0, 1) = T(-100), xv(0, 2) = T(0);  // both tails of the sigmoid, and 0
    auto x = parameter(xv), z = parameter(zv);
    const auto e = silu(x) * z + exp(-x * T(0.1)) + tanh(x) * sigmoid(z);
    static_assert(by_vectors<std::remove_cvref_t<decltype(e)>>);
    static_assert(!by_vectors<decltype(relu(x) * z + exp(x))>);  // relu keeps the element loop
    static_assert(!by_vectors<decltype(x * z + x)>);               // nothing asks for vectors
    Var<T, 2> y = e;
    backward(sum(y));
    double worst = 0;
    for (std::size_t i = 0; i < xv.size(); ++i) {
        const long double a = xv.data()[i], b = zv.data()[i], s = 1 / (1 + std::exp(-a)), sb = 1 / (1 + std::exp(-b));
        const long double t = std::tanh(a), value = a * s * b + std::exp(-a / 10) + t * sb;
        const long double dx = s * (1 + a * (1 - s)) * b - std::exp(-a / 10) / 10 + (1 - t * t) * sb;
        const long double dz = a * s + t * sb * (1 - sb);
        for (auto [got, want] : {std::pair{y.value().data()[i], value}, {x.grad().data()[i], dx}, {z.grad().data()[i], dz}})
            worst = std::max(worst, double(std::fabs(got - want) / (1 + std::fabs(want))));
    }
    CHECK(worst < tolerance);
}

TEST_CASE("expressions with libm's functions run a vector at a time, with libm's values") {
    check_vector_loop<float>(2e-6);
    check_vector_loop<double>(4e-15);
}

TEST_CASE("incompatible broadcast shapes throw, naming the op and both shapes") {
    auto a = constant(T2(std::array<std::size_t, 2>{2, 3}));
    auto b = constant(T1(std::array<std::size_t, 1>{4}));
    CHECK_THROWS_WITH_AS(eval(a + b), "add: cannot broadcast operand of shape (2, 3) with operand of shape (4,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(eval(exp(a) * b), doctest::Contains("mul: cannot broadcast"), shape_error);
}

}  // namespace test_core_expr
