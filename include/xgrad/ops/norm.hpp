// Layer normalization over the last dimension (torch.nn.functional.layer_norm with
// normalized_shape = (C,)): biased variance, optional affine weight γ (C) and bias β (C).
#pragma once
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "xgrad/core/expr.hpp"

namespace xgrad {

namespace detail {

// x seen as (R, C) rows: x̂ = (x - μ) · rstd, rstd = 1/sqrt(var + eps), y = x̂ ⊙ γ + β.
template <Real T, std::size_t N>
class LayerNormNode final : public TensorNode<T, N> {
public:
    Var<T, N> x;  // x, weight and bias are held only when this node requires grad
    Var<T, 1> weight, bias;  // empty when not affine
    std::vector<double> mean, rstd;  // per row, in double as computed, cached for backward

    const char* op_name() const override { return "layer_norm"; }
    auto inputs() { return std::tie(x, weight, bias); }
    void release_inputs() override { x = {}, weight = {}, bias = {}; }
    void for_each_input(const Node::InputVisitor& f) const override { xgrad::visit_inputs(f, x, weight, bias); }

    // x̂ exactly as forward computes it: in double, from the double mean and rstd.
    static double normalized(T x, double mu, double rs) { return (double(x) - mu) * rs; }

    void forward(double eps) {
        const std::size_t C = x.shape()[N - 1], R = C ? x.size() / C : 0;
        mean.resize(R), rstd.resize(R);
        const T* w = weight ? weight.value().data() : nullptr;  // null when not affine
        const T* b = bias ? bias.value().data() : nullptr;
        const T* src = x.value().data();
        T* dst = this->value.data();
        for (std::size_t r = 0; r < R; ++r) {
            const T* xr = src + r * C;
            double mu = 0, var = 0;  // accumulate in double, as torch does for float on CPU
            for (std::size_t c = 0; c < C; ++c) mu += xr[c];
            mu /= double(C);
            for (std::size_t c = 0; c < C; ++c) var += (xr[c] - mu) * (xr[c] - mu);
            var /= double(C);
            const double rs = 1.0 / std::sqrt(var + eps);
            mean[r] = mu, rstd[r] = rs;
            for (std::size_t c = 0; c < C; ++c) {
                T y = static_cast<T>(normalized(xr[c], mu, rs));
                if (w) y *= w[c];
                if (b) y += b[c];
                dst[r * C + c] = y;
            }
        }
    }

    void backward() override {
        const std::size_t C = x.shape()[N - 1], R = C ? x.size() / C : 0;
        const T* src = x.value().data();
        const T* gy = this->grad_buffer().data();
        const T* w = weight ? weight.value().data() : nullptr;
        T* gx = x.requires_grad() ? x.node()->grad_buffer().data() : nullptr;
        T* gw = weight && weight.requires_grad() ? weight.node()->grad_buffer().data() : nullptr;
        T* gb = bias && bias.requires_grad() ? bias.node()->grad_buffer().data() : nullptr;
        for (std::size_t r = 0; r < R; ++r) {
            const T* xr = src + r * C;
            const T* gr = gy + r * C;
            const double mu = mean[r], rs = rstd[r];
            // dγ (C) += Σ_rows dY (R,C) ⊙ x̂ (R,C);   dβ (C) += Σ_rows dY (R,C)
            for (std::size_t c = 0; c < C; ++c) {
                if (gw) gw[c] += static_cast<T>(gr[c] * normalized(xr[c], mu, rs));
                if (gb) gb[c] += gr[c];
            }
            if (!gx) continue;
            // dX̂ (C) = dY (C) ⊙ γ (C)
            // dX (C) += rstd · (dX̂ − mean_c(dX̂) − x̂ ⊙ mean_c(dX̂ ⊙ x̂))
            double mean_g = 0, mean_gx = 0;
            for (std::size_t c = 0; c < C; ++c) {
                const double g = w ? double(gr[c]) * w[c] : gr[c];
                mean_g += g;
                mean_gx += g * normalized(xr[c], mu, rs);
            }
            mean_g /= double(C), mean_gx /= double(C);
            for (std::size_t c = 0; c < C; ++c) {
                const double g = w ? double(gr[c]) * w[c] : gr[c];
                const double xhat = normalized(xr[c], mu, rs);
                gx[r * C + c] += static_cast<T>(rs * (g - mean_g - xhat * mean_gx));
            }
        }
    }
};

template <Real T, std::size_t N>
Var<T, N> layer_norm_impl(const Var<T, N>& x, const Var<T, 1>& weight, const Var<T, 1>& bias, double eps) {
    static_assert(N >= 1, "xgrad: layer_norm needs an input of rank >= 1 (it normalizes the last axis)");
    require_var(x, "layer_norm", "x");  // an empty weight or bias means none
    const std::size_t C = x.shape()[N - 1];
    for (const auto* p : {&weight, &bias})
        if (*p && p->shape()[0] != C)
            throw shape_error(std::string("layer_norm: ") + (p == &weight ? "weight" : "bias") + " must have shape " +
                              shape_str(std::array<std::size_t, 1>{C}) + " to match the last axis of x " +
                              shape_str(x.shape()) + ", got " + shape_str(p->shape()));
    if (!(eps >= 0)) throw value_error("layer_norm: eps must be >= 0, got " + std::to_string(eps));
    return make_op<LayerNormNode<T, N>>(x.shape(), [&](auto& node) { node.forward(eps); }, x, weight, bias);
}

}  // namespace detail

// layer_norm(x, weight, bias, eps): y = (x − mean) / sqrt(var + eps) · weight + bias over the last
// axis of x (…, C); weight and bias have shape (C). Biased variance, as torch.
template <Real T, std::size_t N>
Var<T, N> layer_norm(const Var<T, N>& x, const Var<T, 1>& weight, const Var<T, 1>& bias, double eps = 1e-5) {
    return detail::layer_norm_impl(x, weight, bias, eps);
}

// layer_norm(x, eps): normalization only, no affine transform.
template <Real T, std::size_t N>
Var<T, N> layer_norm(const Var<T, N>& x, double eps = 1e-5) {
    return detail::layer_norm_impl(x, Var<T, 1>{}, Var<T, 1>{}, eps);
}

template <LazyExpression E, class... Args>
auto layer_norm(const E& e, const Args&... args) {
    return layer_norm(eval(e), args...);
}

}  // namespace xgrad
