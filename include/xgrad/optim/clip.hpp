// clip_grad_norm (torch.nn.utils.clip_grad_norm_): scales every present gradient in place so that
// their joint norm is at most max_norm, and returns the joint norm before clipping.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::optim {
namespace detail {

// One gradient's part of the joint norm, in double: Σ |g_i|^p for a finite p, max |g_i| for p = ∞
// (NaN wins). For p = 2, 16 running sums in a fixed order, which the compiler keeps in vector
// registers: the same result for any thread count, at the speed of reading the gradient.
template <Real T>
double norm_part(const T* g, std::size_t n, double p) {
    if (std::isinf(p)) {
        double most = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const double a = std::abs(double(g[i]));
            most = (a > most || a != a) ? a : most;
        }
        return most;
    }
    if (p != 2) {
        double sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += std::pow(std::abs(double(g[i])), p);
        return sum;
    }
    constexpr std::size_t ways = 16;
    std::array<double, ways> sums{};
    std::size_t i = 0;
    for (; i + ways <= n; i += ways)
        for (std::size_t k = 0; k < ways; ++k) sums[k] += double(g[i + k]) * double(g[i + k]);
    for (std::size_t k = 0; i < n; ++i, ++k) sums[k] += double(g[i]) * double(g[i]);
    double sum = 0;
    for (const double s : sums) sum += s;
    return sum;
}

}  // namespace detail

// total = ‖(‖g_1‖_p, ..., ‖g_k‖_p)‖_p over the parameters that have a gradient (max |g| for p = ∞);
// coef = max_norm / (total + 1e-6); gradients are multiplied by coef when coef < 1.
// norm_type must be > 0 (or infinity). error_if_nonfinite: throw value_error on a NaN/inf total.
// Both passes split the parameters over xgrad's threads (a GPT-2 124M gradient is 0.5 GB).
template <Real T>
double clip_grad_norm(const std::vector<ParameterRef<T>>& params, double max_norm, double norm_type = 2,
                      bool error_if_nonfinite = false) {
    if (!(norm_type > 0))
        throw value_error("clip_grad_norm: norm_type must be > 0 or infinity, got " + std::to_string(norm_type));
    if (!(max_norm >= 0)) throw value_error("clip_grad_norm: max_norm must be >= 0, got " + std::to_string(max_norm));
    const bool inf_norm = std::isinf(norm_type);
    struct Present {
        T* grad;  // the parameter's own (mutable) buffer; ParameterRef hands out const views
        std::size_t size;
        double part;
    };
    std::vector<Present> present;
    double elements = 0;
    for (const auto& p : params)
        if (T* g = p.mutable_grad ? p.mutable_grad() : nullptr) present.push_back({g, p.size, 0}), elements += double(p.size);
    if (present.empty()) return 0;
    parallel_for(present.size(), 2 * elements, [&](std::size_t begin, std::size_t end) {
        for (std::size_t k = begin; k < end; ++k) present[k].part = detail::norm_part(present[k].grad, present[k].size, norm_type);
    });
    double total = 0;  // the parts folded in parameter order
    for (const auto& p : present) {
        if (inf_norm) total = (p.part > total || p.part != p.part) ? p.part : total;
        else total += norm_type == 2 ? p.part : std::pow(std::pow(p.part, 1 / norm_type), norm_type);
    }
    if (!inf_norm) total = norm_type == 2 ? std::sqrt(total) : std::pow(total, 1 / norm_type);
    if (error_if_nonfinite && !std::isfinite(total))
        throw value_error("clip_grad_norm: the total gradient norm of order " + std::to_string(norm_type) +
                          " is non-finite (" + std::to_string(total) + "), so it cannot be clipped");
    const double coef = max_norm / (total + 1e-6);
    if (coef < 1) {
        const T c = T(coef);
        parallel_for(present.size(), elements, [&](std::size_t begin, std::size_t end) {
            for (std::size_t k = begin; k < end; ++k) std::transform(present[k].grad, present[k].grad + present[k].size,
                                                                     present[k].grad, [c](T g) { return g * c; });
        });
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

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_CLIP_COMPILED(EXTERN, T) \
    EXTERN template double optim::clip_grad_norm<T>(const std::vector<ParameterRef<T>>&, double, double, bool);
XGRAD_COMPILED_IN(optim, XGRAD_DETAIL_CLIP_COMPILED)
#undef XGRAD_DETAIL_CLIP_COMPILED
}  // namespace xgrad
