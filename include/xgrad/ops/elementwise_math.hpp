// Helpers used by the elementwise op table. normal_cdf, normal_pdf and the tanh GELU are generic:
// on a float or double, and on an xsimd batch (erf, exp and tanh found by argument-dependent
// lookup), so linear's GELU runs them a vector at a time from the same formulas.
#pragma once
#include <cmath>
#include <numbers>
#include <type_traits>

namespace xgrad::detail {

// The constant v as X: a float, a double, or a batch of them.
template <class X>
X lit(double v) {
    if constexpr (std::is_floating_point_v<X>) return X(v);
    else return X(typename X::value_type(v));
}

template <class X>
X sigmoid(X x) {  // stable on both tails
    if (x >= 0) return 1 / (1 + std::exp(-x));
    const X e = std::exp(x);
    return e / (1 + e);
}
template <class X>
X normal_cdf(X x) {
    using std::erf;
    return lit<X>(0.5) * (lit<X>(1) + erf(x * lit<X>(std::numbers::sqrt2 / 2)));
}
template <class X>
X normal_pdf(X x) {
    using std::exp;
    return exp(lit<X>(-0.5) * x * x) * lit<X>(1 / std::sqrt(2 * std::numbers::pi));
}
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <class X>
X gelu_tanh_f(X x) {
    using std::tanh;
    const X k = lit<X>(std::sqrt(2 / std::numbers::pi));
    return lit<X>(0.5) * x * (lit<X>(1) + tanh(k * (x + lit<X>(0.044715) * x * x * x)));
}
template <class X>
X gelu_tanh_d(X x) {
    using std::tanh;
    const X k = lit<X>(std::sqrt(2 / std::numbers::pi)), one = lit<X>(1), half = lit<X>(0.5);
    const X t = tanh(k * (x + lit<X>(0.044715) * x * x * x));
    return half * (one + t) + half * x * (one - t * t) * k * (one + lit<X>(3 * 0.044715) * x * x);
}

}  // namespace xgrad::detail
