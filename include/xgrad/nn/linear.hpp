// nn.Linear: y = x·Wᵀ + b over any leading dims, PyTorch's initialization.
#pragma once
#include <array>
#include <cmath>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/linalg.hpp"

namespace xgrad::nn {

template <Real T>
struct Linear {
    BOOST_HANA_DEFINE_STRUCT(Linear, (Var<T, 2>, weight), (Var<T, 1>, bias));

    Linear() = default;
    // weight (out, in) ~ kaiming_uniform(a = √5) = U(±1/√in); bias (out) ~ U(±1/√in); no bias when !bias.
    Linear(std::size_t in_features, std::size_t out_features, Generator& gen, bool with_bias = true);

    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        xgrad::require_var(weight, "Linear", "weight");  // a default-constructed module
        return bias ? linear(x, weight, bias) : linear(x, weight);
    }
    template <class X>  // an expression (one node), or one readable error (nn/module.hpp)
    auto operator()(const X& x) const {
        return (*this)(xgrad::detail::module_input<T>(x));
    }
    // activation(x·Wᵀ + b) in one node (relu or gelu, ops/linalg.hpp): a feed-forward block's first layer.
    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x, LinearActivation activation) const {
        xgrad::require_var(weight, "Linear", "weight");
        return linear(x, weight, bias, activation);
    }
    // residual + (x·Wᵀ + b) in one node (linear_add): a residual connection after this projection.
    template <std::size_t N>
    Var<T, N> add(const Var<T, N>& residual, const Var<T, N>& x) const {
        xgrad::require_var(weight, "Linear", "weight");
        return linear_add(residual, x, weight, bias);
    }
    std::size_t in_features() const { return weight.shape(1); }
    std::size_t out_features() const { return weight.shape(0); }
};

// Out of the class: libxgrad compiles it once for float and double (XGRAD_COMPILED_IN below).
template <Real T>
Linear<T>::Linear(std::size_t in_features, std::size_t out_features, Generator& gen, bool with_bias) {
    if (in_features == 0 || out_features == 0)
        throw value_error("Linear: in_features and out_features must be positive, got " +
                          std::to_string(in_features) + " and " + std::to_string(out_features));
    weight = parameter(xt::xtensor<T, 2>::from_shape({out_features, in_features}));
    init::kaiming_uniform_(weight, std::sqrt(5.0), gen);
    if (with_bias) {
        bias = parameter(xt::xtensor<T, 1>::from_shape({out_features}));
        const double bound = 1 / std::sqrt(double(in_features));
        init::uniform_(bias, -bound, bound, gen);
    }
}

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_LINEAR_MODULE_COMPILED(EXTERN, T) \
    EXTERN template struct nn::Linear<T>;               \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::Linear<T>, T)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_LINEAR_MODULE_COMPILED)
#undef XGRAD_DETAIL_LINEAR_MODULE_COMPILED
}  // namespace xgrad
