// clip_grad_norm (torch.nn.utils.clip_grad_norm_): scales every present gradient in place so that
// their joint norm is at most max_norm, and returns the joint norm before clipping.
#pragma once
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/nn/module.hpp"

namespace xgrad::optim {

// total = ‖(‖g_1‖_p, ..., ‖g_k‖_p)‖_p over the parameters that have a gradient (max |g| for p = ∞);
// coef = max_norm / (total + 1e-6); gradients are multiplied by coef when coef < 1.
// norm_type must be > 0 (or infinity). error_if_nonfinite: throw value_error on a NaN/inf total.
template <Real T>
double clip_grad_norm(const std::vector<ParameterRef<T>>& params, double max_norm, double norm_type = 2,
                      bool error_if_nonfinite = false) {
    if (!(norm_type > 0))
        throw value_error("clip_grad_norm: norm_type must be > 0 or infinity, got " + std::to_string(norm_type));
    if (!(max_norm >= 0)) throw value_error("clip_grad_norm: max_norm must be >= 0, got " + std::to_string(max_norm));
    const bool inf_norm = std::isinf(norm_type);
    // the gradient buffers are the parameters' own (mutable) storage; ParameterRef hands out const views
    std::vector<T*> grads;
    std::vector<std::size_t> sizes;
    for (const auto& p : params)
        if (T* g = p.mutable_grad ? p.mutable_grad() : nullptr) grads.push_back(g), sizes.push_back(p.size);
    if (grads.empty()) return 0;
    double total = 0;
    for (std::size_t k = 0; k < grads.size(); ++k) {
        double acc = 0;  // this parameter's norm, then folded into the total
        for (std::size_t i = 0; i < sizes[k]; ++i) {
            const double a = std::abs(double(grads[k][i]));
            if (inf_norm) acc = (a > acc || a != a) ? a : acc;
            else acc += norm_type == 2 ? a * a : std::pow(a, norm_type);
        }
        if (inf_norm) total = (acc > total || acc != acc) ? acc : total;
        else total += norm_type == 2 ? acc : std::pow(std::pow(acc, 1 / norm_type), norm_type);
    }
    if (!inf_norm) total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);
    if (error_if_nonfinite && !std::isfinite(total))
        throw value_error("clip_grad_norm: the total gradient norm of order " + std::to_string(norm_type) +
                          " is non-finite (" + std::to_string(total) + "), so it cannot be clipped");
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1) {
        const T c = T(coef);
        for (std::size_t k = 0; k < grads.size(); ++k)
            for (std::size_t i = 0; i < sizes[k]; ++i) grads[k][i] *= c;
    }
    return total;
}

template <class M>
    requires Module<M>
double clip_grad_norm(M& model, double max_norm, double norm_type = 2, bool error_if_nonfinite = false) {
    double total = 0;
    bool done = false;
    // the module's dtype: every parameter has the same one (named_parameters checks)
    for_each_parameter(model, [&](const std::string&, auto& var) {
        if (done) return;
        using V = std::remove_cvref_t<decltype(var)>;
        total = clip_grad_norm(named_parameters<typename V::value_type>(model), max_norm, norm_type,
                               error_if_nonfinite);
        done = true;
    });
    return total;
}

}  // namespace xgrad::optim
