// Gradient checks for scaled_dot_product_attention (every mask kind, scale, dropout, with weights,
// grouped-query)
// and two nn::MultiheadAttention cases the flag sweep (attention_flags.cpp) does not cover.
#include <cstdint>
#include <optional>

#include "mha_check.hpp"
#include "xgrad/check/registry.hpp"

namespace xgrad::checks {
namespace {

const auto sdpa_plain = [](const auto& q, const auto& k, const auto& v) { return scaled_dot_product_attention(q, k, v); };

Mha module(nn::MultiheadAttentionOptions o) {
    Generator g(4);
    return with_random_parameters(Mha(o, g), 50);
}

const RegisterGradchecks registered_attention{"attention", {
    {"scaled_dot_product_attention", "(2,3,4)x(2,5,4)x(2,5,3)",
     [] { return gradcheck(sdpa_plain, randn<3>({2, 3, 4}, 1), randn<3>({2, 5, 4}, 2), randn<3>({2, 5, 3}, 3)); }},
    {"scaled_dot_product_attention", "(2,2,3,4)x(2,2,5,4)x(2,2,5,3)",
     [] {
         return gradcheck(sdpa_plain, randn<4>({2, 2, 3, 4}, 1), randn<4>({2, 2, 5, 4}, 2), randn<4>({2, 2, 5, 3}, 3));
     }},
    {"scaled_dot_product_attention", "(2,2,3,4)x(2,2,4,4)x(2,2,4,2) keep_mask, causal",
     [] {
         const xt::xtensor<bool, 2> keep{{true, false, true, true}, {true, true, false, true}, {false, true, true, true}};
         return gradcheck([&](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, keep_mask(keep), 0.0, true);
         }, randn<4>({2, 2, 3, 4}, 1), randn<4>({2, 2, 4, 4}, 2), randn<4>({2, 2, 4, 2}, 3));
     }},
    {"scaled_dot_product_attention", "(2,2,3,4)x(2,2,5,4)x(2,2,5,3) keep_mask (2,1,3,5)",
     [] {
         const xt::xtensor<bool, 4> keep = xt::xtensor<bool, 4>(randn<4>({2, 1, 3, 5}, 4) > -0.5);
         return gradcheck([&](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, keep_mask(keep));
         }, randn<4>({2, 2, 3, 4}, 1), randn<4>({2, 2, 5, 4}, 2), randn<4>({2, 2, 5, 3}, 3));
     }},
    {"scaled_dot_product_attention", "(2,3,4)x(2,4,4)x(2,4,3) additive_mask, scale",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, additive_mask(randn<3>({2, 1, 4}, 9)), 0.0, false, 0.3);
         }, randn<3>({2, 3, 4}, 1), randn<3>({2, 4, 4}, 2), randn<3>({2, 4, 3}, 3));
     }},
    {"scaled_dot_product_attention", "(2,2,3,4)x(2,2,5,4)x(2,2,5,3) additive_mask, causal, scale",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, additive_mask(randn<2>({3, 5}, 5)), 0.0, true, 0.7);
         }, randn<4>({2, 2, 3, 4}, 1), randn<4>({2, 2, 5, 4}, 2), randn<4>({2, 2, 5, 3}, 3));
     }},
    {"scaled_dot_product_attention", "(2,3,4)x(2,5,4)x(2,5,2) valid_lens (2)",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, valid_lens(xt::xtensor<std::int64_t, 1>{2, 5}));
         }, randn<3>({2, 3, 4}, 6), randn<3>({2, 5, 4}, 7), randn<3>({2, 5, 2}, 8));
     }},
    {"scaled_dot_product_attention", "(2,3,4)x(2,5,4)x(2,5,2) dropout 0.4",
     [] {
         Generator g;
         return gradcheck([&](const auto& q, const auto& k, const auto& v) {
             g.manual_seed(3);
             return scaled_dot_product_attention(q, k, v, no_mask, 0.4, false, std::nullopt, &g);
         }, randn<3>({2, 3, 4}, 6), randn<3>({2, 5, 4}, 7), randn<3>({2, 5, 2}, 8));
     }},
    {"scaled_dot_product_attention", "(2,4,3,4)x(2,2,5,4)x(2,2,5,4) enable_gqa, causal",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, no_mask, 0.0, true, std::nullopt, nullptr, true);
         }, randn<4>({2, 4, 3, 4}, 1), randn<4>({2, 2, 5, 4}, 2), randn<4>({2, 2, 5, 4}, 3));
     }},
    {"scaled_dot_product_attention", "(1,3,3,4)x(1,1,5,4)x(1,1,5,2) enable_gqa (multi-query), Ev != E",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             return scaled_dot_product_attention(q, k, v, no_mask, 0.0, false, std::nullopt, nullptr, true);
         }, randn<4>({1, 3, 3, 4}, 1), randn<4>({1, 1, 5, 4}, 2), randn<4>({1, 1, 5, 2}, 3));
     }},
    {"scaled_dot_product_attention_with_weights", "(2,3,4)x(2,5,4)x(2,5,3) causal, output and weights",
     [] {
         return gradcheck([](const auto& q, const auto& k, const auto& v) {
             const auto r = scaled_dot_product_attention_with_weights(q, k, v, no_mask, 0.0, true);
             return concat({reshape<1>(r.output, {-1}), reshape<1>(r.weights, {-1})}, 0);
         }, randn<3>({2, 3, 4}, 1), randn<3>({2, 5, 4}, 2), randn<3>({2, 5, 3}, 3));
     }},
    {"MultiheadAttention", "E=4 H=2 q(3,4) kv(3,4) unbatched, is_causal, per-head weights, no bias",
     [] {
         nn::MhaForwardOptions<double> fo{.average_attn_weights = false, .is_causal = true};
         const auto m = module({.embed_dim = 4, .num_heads = 2, .bias = false});
         return check_module<2>(m, randn<2>({3, 4}, 1), randn<2>({3, 4}, 2), randn<2>({3, 4}, 3), fo);
     }},
    {"MultiheadAttention", "E=4 H=2 q(3,2,4) kv(3,2,4) valid_lens, dropout 0.3",
     [] {
         auto m = module({.embed_dim = 4, .num_heads = 2, .dropout = 0.3});
         Generator& drop = *m.dropout_generator;
         nn::MhaForwardOptions<double> fo;
         fo.valid_lens = valid_lens(xt::xarray<std::int64_t>{2, 3});
         return check_module<3>(m, randn<3>({3, 2, 4}, 1), randn<3>({3, 2, 4}, 2), randn<3>({3, 2, 4}, 3), fo, &drop);
     }},
}};

}  // namespace
}  // namespace xgrad::checks
