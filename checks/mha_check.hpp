// Shared by the attention gradchecks: a whole-module gradcheck of nn::MultiheadAttention w.r.t.
// query, key, value and every parameter (one flat input sliced into the module).
#pragma once
#include <string>
#include <vector>

#include "xgrad/check/module_check.hpp"
#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {

using Mha = nn::MultiheadAttention<double>;

// m (any module) with every parameter 0.5 · N(0, 1) from consecutive seeds (torch's init zeroes
// the biases and sets LayerNorm to ones; random values exercise their gradients better).
template <class M>
M with_random_parameters(M m, unsigned seed) {
    for_each_parameter(m, [&](const std::string&, auto& p) {
        for (auto& x : p.value()) x = 0.5 * randn<1>({1}, seed++)(0);
    });
    return m;
}

// Full-Jacobian gradcheck of the output and attention weights (flattened, joined) w.r.t. query,
// key, value and every parameter; `reseed` (the module's dropout generator) is re-seeded before
// every evaluation, so every evaluation drops the same elements.
template <std::size_t N>
GradcheckResult check_module(const Mha& m, const xt::xtensor<double, N>& q, const xt::xtensor<double, N>& k,
                             const xt::xtensor<double, N>& v, const nn::MhaForwardOptions<double>& fo,
                             Generator* reseed = nullptr) {
    GradcheckOptions opt;
    opt.mode = GradcheckOptions::Mode::full;
    return gradcheck(
        [&](const auto& query, const auto& key, const auto& value, const auto& params) {
            if (reseed) reseed->manual_seed(7);
            const auto r = with_flat_parameters(m, params).forward(query, key, value, fo);
            std::vector<Var<double, 1>> parts{reshape<1>(r.output, {-1})};
            if (r.attn_weights) parts.push_back(reshape<1>(r.attn_weights, {-1}));
            if (r.attn_weights_per_head) parts.push_back(reshape<1>(r.attn_weights_per_head, {-1}));
            return concat(parts, 0);
        },
        q, k, v, flatten_parameters(m), opt);
}

}  // namespace xgrad::checks
