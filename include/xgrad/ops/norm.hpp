// Normalization over the last dimension: layer_norm (torch.nn.functional.layer_norm with
// normalized_shape = (C,): biased variance, optional affine weight γ (C) and bias β (C)) and
// rms_norm (torch.nn.functional.rms_norm: no centering, the root mean square, optional weight γ),
// one node for both.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/core/parallel.hpp"

namespace xgrad {

namespace detail {

// Σ f(c) over c in [0, C) in double, in 8 running sums (vectorized) added in a fixed order at the
// end: the same result on every run and thread count. f returns the terms of S sums at once.
template <std::size_t S, class F>
std::array<double, S> row_sums(std::size_t C, const F& f) {
    constexpr std::size_t W = 8;
    std::array<std::array<double, W>, S> acc{};
    std::size_t c = 0;
    for (; c + W <= C; c += W)
        for (std::size_t j = 0; j < W; ++j) {
            const std::array<double, S> t = f(c + j);
            for (std::size_t s = 0; s < S; ++s) acc[s][j] += t[s];
        }
    for (std::size_t j = 0; c < C; ++c, ++j) {
        const std::array<double, S> t = f(c);
        for (std::size_t s = 0; s < S; ++s) acc[s][j] += t[s];
    }
    std::array<double, S> out{};
    for (std::size_t s = 0; s < S; ++s)
        for (std::size_t j = 0; j < W; ++j) out[s] += acc[s][j];
    return out;
}

// x seen as (R, C) rows: x̂ = (x - μ) · rstd, rstd = 1/sqrt(var + eps), y = x̂ ⊙ γ + β; centered =
// false (rms_norm) takes μ = 0 and the mean square for var, and has no β.
// Forward reads a row twice: one pass for the mean and the variance, one to write y. The one-pass
// moments are taken about the row's first element K (a value of the row, so (K − μ)² ≤ C · var and
// the cancellation in var = (Σ(x−K)² − (Σ(x−K))²/C) / C costs at most C ulps relative, in double).
// Backward takes its two row sums in one pass.
template <Real T, std::size_t N>
class NormNode final : public OpNode<NormNode<T, N>, T, N> {
public:
    Var<T, N> x;  // x, weight and bias are held only when this node requires grad
    Var<T, 1> weight, bias;  // empty when not affine
    std::vector<double> mean, rstd;  // per row, in double as computed, cached for backward
    bool centered = true;            // false: rms_norm

    const char* op_name() const override { return centered ? "layer_norm" : "rms_norm"; }
    auto inputs() { return std::tie(x, weight, bias); }

    // Work per element for parallel_for, in its unit (a GEMM's flop, about 0.01 ns on one core): the
    // double arithmetic takes about 0.8 ns an element forward and 0.6 ns in each backward pass.
    static constexpr double forward_work = 80, backward_work = 60;

    // x̂ exactly as forward computes it: in double, from the double mean and rstd.
    static double normalized(T x, double mu, double rs) { return (double(x) - mu) * rs; }

    void forward(double eps) {
        const std::size_t C = x.shape()[N - 1], R = C ? x.size() / C : 0;
        mean.resize(R), rstd.resize(R);
        const T* w = weight ? weight.value().data() : nullptr;  // null when not affine
        const T* b = bias ? bias.value().data() : nullptr;
        const T* src = x.value().data();
        T* dst = this->value.data();
        parallel_for(R, forward_work * double(R) * double(C), [&](std::size_t first, std::size_t last) {
            for (std::size_t r = first; r < last; ++r) {
                const T* xr = src + r * C;
                T* yr = dst + r * C;
                const double shift = centered ? double(xr[0]) : 0.0;  // accumulate in double
                const auto [s1, s2] = row_sums<2>(C, [&](std::size_t c) {
                    const double d = double(xr[c]) - shift;
                    return std::array<double, 2>{d, d * d};
                });
                // rms_norm: μ = 0, var = mean(x²)
                const double mu = centered ? shift + s1 / double(C) : 0.0;
                const double var = centered ? std::max(0.0, (s2 - s1 * (s1 / double(C))) / double(C)) : s2 / double(C);
                const double rs = 1.0 / std::sqrt(var + eps);
                mean[r] = mu, rstd[r] = rs;
                if (w && b)
                    for (std::size_t c = 0; c < C; ++c) yr[c] = static_cast<T>(normalized(xr[c], mu, rs)) * w[c] + b[c];
                else
                    for (std::size_t c = 0; c < C; ++c) {
                        T y = static_cast<T>(normalized(xr[c], mu, rs));
                        if (w) y *= w[c];
                        if (b) y += b[c];
                        yr[c] = y;
                    }
            }
        });
    }

    // On xgrad's threads: dγ and dβ by blocks of columns, each column summed over the rows in
    // order (the result does not depend on the thread count), then dX by blocks of rows.
    void backward() override {
        const std::size_t C = x.shape()[N - 1], R = C ? x.size() / C : 0;
        const T* src = x.value().data();
        const T* gy = this->grad_buffer().data();
        const T* w = weight ? weight.value().data() : nullptr;
        T* gx = x.requires_grad() ? x.node()->grad_buffer().data() : nullptr;
        T* gw = weight && weight.requires_grad() ? weight.node()->grad_buffer().data() : nullptr;
        T* gb = bias && bias.requires_grad() ? bias.node()->grad_buffer().data() : nullptr;
        const double work = backward_work * double(R) * double(C);
        // dγ (C) += Σ_rows dY (R,C) ⊙ x̂ (R,C);   dβ (C) += Σ_rows dY (R,C)
        constexpr std::size_t column_block = 64;
        if (gw || gb)
            parallel_for((C + column_block - 1) / column_block, work, [&](std::size_t first, std::size_t last) {
                const std::size_t c0 = first * column_block, c1 = std::min(C, last * column_block);
                for (std::size_t r = 0; r < R; ++r) {
                    const T* xr = src + r * C;
                    const T* gr = gy + r * C;
                    const double mu = mean[r], rs = rstd[r];
                    if (gw)
                        for (std::size_t c = c0; c < c1; ++c) gw[c] += static_cast<T>(gr[c] * normalized(xr[c], mu, rs));
                    if (gb)
                        for (std::size_t c = c0; c < c1; ++c) gb[c] += gr[c];
                }
            });
        if (!gx) return;
        parallel_for(R, work, [&](std::size_t first, std::size_t last) {
            for (std::size_t r = first; r < last; ++r) {
                const T* xr = src + r * C;
                const T* gr = gy + r * C;
                const double mu = mean[r], rs = rstd[r];
                // dX̂ (C) = dY (C) ⊙ γ (C)
                // dX (C) += rstd · (dX̂ − mean_c(dX̂) − x̂ ⊙ mean_c(dX̂ ⊙ x̂))   (rms_norm: no mean_c(dX̂))
                const auto g = [&](std::size_t c) { return w ? double(gr[c]) * w[c] : double(gr[c]); };
                auto [mean_g, mean_gx] = row_sums<2>(C, [&](std::size_t c) {
                    return std::array<double, 2>{g(c), g(c) * normalized(xr[c], mu, rs)};
                });
                mean_g = centered ? mean_g / double(C) : 0.0, mean_gx /= double(C);
                T* gxr = gx + r * C;
                for (std::size_t c = 0; c < C; ++c)
                    gxr[c] += static_cast<T>(rs * (g(c) - mean_g - normalized(xr[c], mu, rs) * mean_gx));
            }
        });
    }
};

template <Real T, std::size_t N>
Var<T, N> norm_impl(const Var<T, N>& x, const Var<T, 1>& weight, const Var<T, 1>& bias, double eps, bool centered) {
    static_assert(N >= 1, "xgrad: layer_norm and rms_norm need an input of rank >= 1 (they normalize the last axis)");
    const char* op = centered ? "layer_norm" : "rms_norm";
    require_var(x, op, "x");  // an empty weight or bias means none
    const std::size_t C = x.shape()[N - 1];
    for (const auto* p : {&weight, &bias})
        if (*p && p->shape()[0] != C)
            throw shape_error(std::string(op) + ": " + (p == &weight ? "weight" : "bias") + " must have shape " +
                              shape_str(std::array<std::size_t, 1>{C}) + " to match the last axis of x " +
                              shape_str(x.shape()) + ", got " + shape_str(p->shape()));
    if (!(eps >= 0)) throw value_error(std::string(op) + ": eps must be >= 0, got " + std::to_string(eps));
    return make_op<NormNode<T, N>>(
        x.shape(), [&](auto& node) { node.centered = centered, node.forward(eps); }, x, weight, bias);
}

}  // namespace detail

// layer_norm(x, weight, bias, eps): y = (x − mean) / sqrt(var + eps) · weight + bias over the last
// axis of x (…, C); weight and bias have shape (C). Biased variance, as torch.
template <Real T, std::size_t N>
Var<T, N> layer_norm(const Var<T, N>& x, const Var<T, 1>& weight, const Var<T, 1>& bias, double eps = 1e-5) {
    return detail::norm_impl(x, weight, bias, eps, true);
}

// layer_norm(x, eps): normalization only, no affine transform.
template <Real T, std::size_t N>
Var<T, N> layer_norm(const Var<T, N>& x, double eps = 1e-5) {
    return detail::norm_impl(x, Var<T, 1>{}, Var<T, 1>{}, eps, true);
}

template <LazyExpression E, class... Args>
auto layer_norm(const E& e, const Args&... args) {
    return layer_norm(eval(e), args...);
}

// rms_norm(x, weight, eps): y = x / sqrt(mean(x²) + eps) · weight over the last axis of x (…, C);
// weight has shape (C). As torch.nn.functional.rms_norm, and Llama's RMSNorm (which takes eps 1e-5
// or 1e-6); torch's default eps is the machine epsilon of x's type.
template <Real T, std::size_t N>
Var<T, N> rms_norm(const Var<T, N>& x, const Var<T, 1>& weight, double eps = std::numeric_limits<T>::epsilon()) {
    return detail::norm_impl(x, weight, Var<T, 1>{}, eps, false);
}

// rms_norm(x, eps): normalization only, no weight.
template <Real T, std::size_t N>
Var<T, N> rms_norm(const Var<T, N>& x, double eps = std::numeric_limits<T>::epsilon()) {
    return detail::norm_impl(x, Var<T, 1>{}, Var<T, 1>{}, eps, false);
}

template <LazyExpression E, class... Args>
auto rms_norm(const E& e, const Args&... args) {
    return rms_norm(eval(e), args...);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): layer_norm and rms_norm.
namespace xgrad {
#define XGRAD_DETAIL_NORM_COMPILED(EXTERN, T, N)                                                                \
    EXTERN template Var<T, N> detail::norm_impl<T, N>(const Var<T, N>&, const Var<T, 1>&, const Var<T, 1>&, double, \
                                                      bool);
#define XGRAD_DETAIL_NORMS_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_NORM_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_NORMS_COMPILED)
#undef XGRAD_DETAIL_NORMS_COMPILED
#undef XGRAD_DETAIL_NORM_COMPILED
}  // namespace xgrad
