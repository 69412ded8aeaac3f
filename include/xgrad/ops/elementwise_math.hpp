// Scalar helpers used by the elementwise op table.
#pragma once
#include <cmath>
#include <numbers>

namespace xgrad::detail {

template <class X>
X sigmoid(X x) {  // stable on both tails
    if (x >= 0) return 1 / (1 + std::exp(-x));
    const X e = std::exp(x);
    return e / (1 + e);
}
template <class X>
X normal_cdf(X x) {
    return X(0.5) * (1 + std::erf(x * X(std::numbers::sqrt2 / 2)));
}
template <class X>
X normal_pdf(X x) {
    return std::exp(X(-0.5) * x * x) * X(1 / std::sqrt(2 * std::numbers::pi));
}
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
template <class X>
X gelu_tanh_f(X x) {
    const X k = X(std::sqrt(2 / std::numbers::pi));
    return X(0.5) * x * (1 + std::tanh(k * (x + X(0.044715) * x * x * x)));
}
template <class X>
X gelu_tanh_d(X x) {
    const X k = X(std::sqrt(2 / std::numbers::pi));
    const X t = std::tanh(k * (x + X(0.044715) * x * x * x));
    return X(0.5) * (1 + t) + X(0.5) * x * (1 - t * t) * k * (1 + 3 * X(0.044715) * x * x);
}

}  // namespace xgrad::detail
