// Gradient checks for scaled_dot_product_attention and nn::MultiheadAttention (w.r.t. query, key,
// value and every parameter, which enter as one flat input sliced into the module).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xadapt.hpp>

#include "checks/registry.hpp"
#include "xgrad/check/module_check.hpp"
#include "xgrad/nn/attention.hpp"

namespace xgrad::checks {
namespace {

using Mha = nn::MultiheadAttention<double>;

Mha module(nn::MultiheadAttentionOptions o) {
    Generator g(4);
    Mha m(o, g);
    unsigned seed = 50;  // nonzero biases
    for_each_parameter(m, [&](const std::string&, auto& p) {
        for (auto& x : p.value()) x = 0.5 * randn<1>({1}, seed++)(0);
    });
    return m;
}

// output and attention weights, flattened and joined, as one function of (q, k, v, parameters)
template <std::size_t N>
GradcheckResult check_mha(const Mha& m, std::array<std::size_t, N> qs, std::array<std::size_t, N> ks,
                          std::array<std::size_t, N> vs, nn::MhaForwardOptions<double> fo, Generator* reseed = nullptr) {
    return gradcheck(
        [&](const auto& q, const auto& k, const auto& v, const auto& params) {
            if (reseed) reseed->manual_seed(1);
            const auto r = with_flat_parameters(m, params).forward(q, k, v, fo);
            std::vector<Var<double, 1>> parts{reshape<1>(r.output, {-1})};
            if (r.attn_weights) parts.push_back(reshape<1>(r.attn_weights, {-1}));
            if (r.attn_weights_per_head) parts.push_back(reshape<1>(r.attn_weights_per_head, {-1}));
            return concat(parts, 0);
        },
        randn<N>(qs, 1), randn<N>(ks, 2), randn<N>(vs, 3), flatten_parameters(m));
}

const Register registered_attention{{
    {"scaled_dot_product_attention", "(2,3,4)x(2,5,4)x(2,5,3)",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) { return scaled_dot_product_attention(q, k, v); },
                          randn<3>({2, 3, 4}, 1), randn<3>({2, 5, 4}, 2), randn<3>({2, 5, 3}, 3));
     }},
    {"scaled_dot_product_attention (keep_mask, causal)", "(2,2,3,4)x(2,2,4,4)x(2,2,4,2)",
     [] {
         const xt::xtensor<bool, 2> keep{{true, false, true, true}, {true, true, false, true}, {false, true, true, true}};
         return gradcheck([&](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, keep_mask(keep), 0.0, true);
         }, randn<4>({2, 2, 3, 4}, 1), randn<4>({2, 2, 4, 4}, 2), randn<4>({2, 2, 4, 2}, 3));
     }},
    {"scaled_dot_product_attention (additive_mask, scale)", "(2,3,4)x(2,4,4)x(2,4,3)",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, additive_mask(randn<3>({2, 1, 4}, 9)), 0.0, false, 0.3);
         }, randn<3>({2, 3, 4}, 1), randn<3>({2, 4, 4}, 2), randn<3>({2, 4, 3}, 3));
     }},
    {"MultiheadAttention (key_padding_mask bool)", "E=4 H=2 q(3,2,4) kv(3,2,4)",
     [] {
         nn::MhaForwardOptions<double> fo;
         fo.key_padding_mask = ignore_mask(xt::xarray<bool>{{false, true, false}, {false, false, true}});
         return check_mha<3>(module({.embed_dim = 4, .num_heads = 2}), {3, 2, 4}, {3, 2, 4}, {3, 2, 4}, fo);
     }},
    {"MultiheadAttention (kdim, vdim, bias_kv, zero_attn, batch_first, 3-D float attn_mask)", "E=4 H=2 q(2,3,4) k(2,2,3) v(2,2,5)",
     [] {
         nn::MhaForwardOptions<double> fo;
         fo.attn_mask = additive_mask(xt::xarray<double>(0.5 * randn<3>({4, 3, 2}, 8)));
         const auto m = module({.embed_dim = 4, .num_heads = 2, .add_bias_kv = true, .add_zero_attn = true,
                                .kdim = 3, .vdim = 5, .batch_first = true});
         return check_mha<3>(m, {2, 3, 4}, {2, 2, 3}, {2, 2, 5}, fo);
     }},
    {"MultiheadAttention (unbatched, is_causal, per-head weights, no bias)", "E=4 H=2 q(3,4) kv(3,4)",
     [] {
         nn::MhaForwardOptions<double> fo{.average_attn_weights = false, .is_causal = true};
         return check_mha<2>(module({.embed_dim = 4, .num_heads = 2, .bias = false}), {3, 4}, {3, 4}, {3, 4}, fo);
     }},
    {"MultiheadAttention (valid_lens, dropout 0.3)", "E=4 H=2 q(3,2,4) kv(3,2,4)",
     [] {
         static Generator drop;
         auto m = module({.embed_dim = 4, .num_heads = 2, .dropout = 0.3});
         m.dropout_generator = &drop;
         nn::MhaForwardOptions<double> fo;
         fo.valid_lens = xt::xarray<std::int64_t>{2, 3};
         return check_mha<3>(m, {3, 2, 4}, {3, 2, 4}, {3, 2, 4}, fo, &drop);
     }},
}};

}  // namespace
}  // namespace xgrad::checks
