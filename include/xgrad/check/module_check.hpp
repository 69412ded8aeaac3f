// Gradient checks of a whole module with respect to its parameters: the parameters become slices
// of one flat input, so gradcheck(f, flatten_parameters(m), x...) covers them all at once.
//
//   auto r = gradcheck([&](auto& flat, auto& x) { return with_flat_parameters(model, flat)(x); },
//                      flatten_parameters(model), x0);
#pragma once
#include <array>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "xgrad/nn/module.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {

// Every parameter's values, in for_each_parameter order, as one vector.
template <class M>
xt::xtensor<double, 1> flatten_parameters(const M& m) {
    std::vector<double> flat;
    for_each_parameter(m, [&](const std::string&, const auto& p) { flat.insert(flat.end(), p.value().begin(), p.value().end()); });
    return xt::adapt(flat, std::array<std::size_t, 1>{flat.size()});
}

// A copy of m whose parameters are reshaped slices of `flat` (for_each_parameter order; a tied
// tensor is one slice under all its names), so gradients flow from the module's outputs into `flat`.
template <class M>
M with_flat_parameters(const M& m, const Var<double, 1>& flat) {
    M copy = m;
    long offset = 0;
    detail::replace_parameters(copy, [&](const auto& p) {
        constexpr std::size_t R = std::remove_cvref_t<decltype(p)>::rank;
        std::array<long, R> shape;
        for (std::size_t k = 0; k < R; ++k) shape[k] = long(p.shape(k));
        const long n = long(p.size());
        const auto sliced = reshape<R>(slice(flat, 0, offset, offset + n), shape);
        offset += n;
        return sliced;
    });
    return copy;
}

}  // namespace xgrad
