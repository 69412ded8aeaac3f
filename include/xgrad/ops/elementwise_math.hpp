// Helpers used by the elementwise op table, generic: on a float or double, and on an xsimd batch
// (erf, exp, tanh… found by argument-dependent lookup), so an expression's loop and linear's GELU
// run them a vector at a time from the same formulas.
#pragma once
#include <cmath>
#include <numbers>
#include <type_traits>

#include "xgrad/core/simd.hpp"

namespace xgrad::detail {

// The constant v as X: a float, a double, or a batch of them.
template <class X>
X lit(double v) {
    if constexpr (std::is_floating_point_v<X>) return X(v);
    else return X(typename X::value_type(v));
}

// exp_of, log_of, sqrt_of, tanh_of, erf_of: std:: on a float or a double, simd:: on a batch
#define XGRAD_DETAIL_MATH_OF(F, ON_BATCH)                       \
    template <class X>                                          \
    X F##_of(X x) {                                             \
        if constexpr (std::is_floating_point_v<X>) return std::F(x); \
        else return ON_BATCH;                                   \
    }
XGRAD_DETAIL_MATH_OF(exp, simd::exp(x))
XGRAD_DETAIL_MATH_OF(log, simd::log(x))
XGRAD_DETAIL_MATH_OF(sqrt, simd::sqrt(x))
XGRAD_DETAIL_MATH_OF(tanh, simd::tanh(x))
XGRAD_DETAIL_MATH_OF(erf, simd::erf(x))
#undef XGRAD_DETAIL_MATH_OF

// 1 / (1 + e^-x), stable on both tails: e^x / (1 + e^x) below 0. A batch takes each lane's form.
template <class X>
X sigmoid(X x) {
    if constexpr (std::is_floating_point_v<X>) {
        if (x >= 0) return 1 / (1 + std::exp(-x));
        const X e = std::exp(x);
        return e / (1 + e);
    } else {
        const X one = lit<X>(1), e = exp_of(-abs(x)), d = one + e;
        return select(x >= lit<X>(0), one / d, e / d);
    }
}
template <class X>
X normal_cdf(X x) {
    return lit<X>(0.5) * (lit<X>(1) + erf_of(x * lit<X>(std::numbers::sqrt2 / 2)));
}
template <class X>
X normal_pdf(X x) {
    return exp_of(lit<X>(-0.5) * x * x) * lit<X>(1 / std::sqrt(2 * std::numbers::pi));
}
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <class X>
X gelu_tanh_f(X x) {
    const X k = lit<X>(std::sqrt(2 / std::numbers::pi));
    return lit<X>(0.5) * x * (lit<X>(1) + tanh_of(k * (x + lit<X>(0.044715) * x * x * x)));
}
template <class X>
X gelu_tanh_d(X x) {
    const X k = lit<X>(std::sqrt(2 / std::numbers::pi)), one = lit<X>(1), half = lit<X>(0.5);
    const X t = tanh_of(k * (x + lit<X>(0.044715) * x * x * x));
    return half * (one + t) + half * x * (one - t * t) * k * (one + lit<X>(3 * 0.044715) * x * x);
}

}  // namespace xgrad::detail
