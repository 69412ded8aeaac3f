// Gradient checks of the Transformer layers, stacks and nn::Transformer (nn/transformer.hpp): full
// Jacobians in double w.r.t. every input (src, tgt, memory, pos, query_pos) and every parameter
// (one flat input), across norm_first × activation × mask kinds × batch_first / unbatched ×
// DETR's positions, 3DETR's per-layer masks and attention weights, dropout in training, and
// nn::DetrTransformer.
// d_model 4, nhead 2, dim_feedforward 6, S = 3 source and T = 2 target positions, batch 2.
#include <cstddef>
#include <optional>
#include <vector>

#include "mha_check.hpp"
#include "xgrad/check/registry.hpp"
#include "xgrad/nn/additive_attention.hpp"
#include "xgrad/nn/detr.hpp"
#include "xgrad/nn/position_embedding.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace transformer_checks {  // its own names: unity builds join several check files
namespace {

using EncoderLayer = nn::TransformerEncoderLayer<double>;
using DecoderLayer = nn::TransformerDecoderLayer<double>;
using Act = nn::Activation;
constexpr std::size_t S = 3, T = 2, B = 2, E = 4, H = 2;

nn::TransformerLayerOptions small(bool norm_first, Act act, bool batch_first = false, double dropout = 0) {
    nn::TransformerLayerOptions o;
    o.d_model = E, o.nhead = H, o.dim_feedforward = 6, o.dropout = dropout;
    o.activation = act, o.batch_first = batch_first, o.norm_first = norm_first;
    return o;
}

// A sequence of n positions: (n, B, E), (B, n, E) if batch_first; unbatched (n, E).
template <std::size_t N>
xt::xtensor<double, N> sequence(std::size_t n, bool batch_first, unsigned seed) {
    if constexpr (N == 2) return randn<2>({n, E}, seed);
    else return batch_first ? randn<3>({B, n, E}, seed) : randn<3>({n, B, E}, seed);
}

xt::xarray<bool> bools(std::initializer_list<std::size_t> shape, unsigned seed) {  // ~1/3 true, key 0 kept
    xt::xarray<bool> m = xt::xarray<bool>::from_shape(shape);
    const std::size_t last = *(shape.end() - 1);
    for (std::size_t i = 0; i < m.size(); ++i) m.data()[i] = i % last != 0 && randn<1>({1}, seed + unsigned(i))(0) > 0.4;
    return m;
}

// a copy of forward options o with DETR's positions p
template <class Options, class P>
Options at(Options o, const P& p) {
    o.pos = p;
    return o;
}

template <std::size_t N>
Var<double, 1> flat(const Var<double, N>& x) {
    return reshape<1>(x, {-1});
}

// Full-Jacobian gradcheck of call(module with the flat parameters, inputs...) w.r.t. the module's
// parameters and the inputs; with `reseed`, every generator of the module (its dropouts') restarts
// before every evaluation, so every evaluation drops the same elements.
template <class M, class Call, class... X>
GradcheckResult module_gradcheck(const M& m, bool reseed, Call call, const X&... inputs) {
    GradcheckOptions opt;
    opt.mode = GradcheckOptions::Mode::full;
    return gradcheck(
        [&](const auto& params, const auto&... vars) {
            if (reseed)
                for (const auto& [name, gen] : named_generators(m)) gen->manual_seed(7);
            return call(with_flat_parameters(m, params), vars...);
        },
        flatten_parameters(m), inputs..., opt);
}

// ---- layers ----

template <std::size_t N>
GradcheckResult encoder_layer(const nn::TransformerLayerOptions& lo, nn::EncoderForwardOptions<double, N> fo,
                              bool pos, unsigned seed, nn::ActivationFunction<double> act = {}) {
    Generator gen(seed);
    const auto m = with_random_parameters(act ? EncoderLayer(lo, act, gen) : EncoderLayer(lo, gen), seed);
    const bool reseed = lo.dropout > 0;
    const auto src = sequence<N>(S, lo.batch_first, seed + 1);
    if (!pos)
        return module_gradcheck(m, reseed, [&](const EncoderLayer& l, const auto& x) { return flat(l.forward(x, fo)); },
                                src);
    return module_gradcheck(
        m, reseed,
        [&](const EncoderLayer& l, const auto& x, const auto& p) { return flat(l.forward(x, at(fo, p))); },
        src, sequence<N>(S, lo.batch_first, seed + 2));
}

template <std::size_t N>
GradcheckResult decoder_layer(const nn::TransformerLayerOptions& lo, nn::DecoderForwardOptions<double, N> fo, bool pos,
                              unsigned seed) {
    Generator gen(seed);
    const auto m = with_random_parameters(DecoderLayer(lo, gen), seed);
    const bool reseed = lo.dropout > 0;
    const auto tgt = sequence<N>(T, lo.batch_first, seed + 1), memory = sequence<N>(S, lo.batch_first, seed + 2);
    if (!pos)
        return module_gradcheck(
            m, reseed, [&](const DecoderLayer& l, const auto& t, const auto& mem) { return flat(l.forward(t, mem, fo)); },
            tgt, memory);
    return module_gradcheck(
        m, reseed,
        [&](const DecoderLayer& l, const auto& t, const auto& mem, const auto& p, const auto& qp) {
            auto o = at(fo, p);
            o.query_pos = qp;
            return flat(l.forward(t, mem, o));
        },
        tgt, memory, sequence<N>(S, lo.batch_first, seed + 3), sequence<N>(T, lo.batch_first, seed + 4));
}

// output and every layer's attention weights, flattened and joined
template <std::size_t N>
Var<double, 1> output_and_weights(const nn::TransformerStackOutput<double, N>& r) {
    std::vector<Var<double, 1>> parts{flat(r.output)};
    for (const auto& w : r.attn_weights) parts.push_back(flat(w));
    return concat(parts, 0);
}

// output and weights of d2l's AdditiveAttention w.r.t. queries, keys, values and its parameters
template <std::size_t V>
GradcheckResult additive_attention(const std::optional<xt::xtensor<std::int64_t, V>>& lens, double dropout, unsigned seed) {
    Generator gen(seed);
    const auto m = with_random_parameters(nn::AdditiveAttention<double>(2, 3, 5, dropout, gen), seed);
    return module_gradcheck(
        m, dropout > 0,
        [&](const auto& a, const auto& q, const auto& k, const auto& v) {
            const auto r = lens ? a.forward(q, k, v, valid_lens(*lens)) : a.forward(q, k, v);
            return concat({flat(r.output), flat(r.weights)}, 0);
        },
        randn<3>({2, 2, 3}, seed + 1), randn<3>({2, 4, 2}, seed + 2), randn<3>({2, 4, 3}, seed + 3));
}

nn::EncoderForwardOptions<double, 3> encoder_masks(bool bool_masks) {
    nn::EncoderForwardOptions<double, 3> o;
    if (bool_masks) o.src_mask = ignore_mask(bools({S, S}, 3)), o.src_key_padding_mask = ignore_mask(bools({B, S}, 4));
    else o.src_mask = additive_mask(xt::xarray<double>(randn<3>({B * H, S, S}, 5)));
    return o;
}

const RegisterGradchecks registered_transformer{"transformer", {
    {"TransformerEncoderLayer", "post-norm relu (3,2,4)",
     [] { return encoder_layer<3>(small(false, Act::relu), {}, false, 10); }},
    {"TransformerEncoderLayer", "pre-norm gelu batch_first, bool src_mask (3,3) + key padding, pos",
     [] {
         auto o = encoder_masks(true);
         return encoder_layer<3>(small(true, Act::gelu, true), o, true, 20);
     }},
    {"TransformerEncoderLayer", "post-norm tanh function, float src_mask (N*H,3,3)",
     [] {
         return encoder_layer<3>(small(false, Act::relu), encoder_masks(false), false, 30,
                                 [](const Var<double, 3>& x) -> Var<double, 3> { return tanh(x); });
     }},
    {"TransformerEncoderLayer", "pre-norm relu unbatched (3,4), bool src_mask (H,3,3) + key padding (3), pos",
     [] {
         nn::EncoderForwardOptions<double, 2> o;
         o.src_mask = ignore_mask(bools({H, S, S}, 6)), o.src_key_padding_mask = ignore_mask(bools({S}, 7));
         return encoder_layer<2>(small(true, Act::relu), o, true, 40);
     }},
    {"TransformerEncoderLayer", "post-norm relu, dropout 0.3 (attention and residual) in training",
     [] { return encoder_layer<3>(small(false, Act::relu, false, 0.3), encoder_masks(true), false, 50); }},
    {"TransformerDecoderLayer", "post-norm relu, causal tgt_mask + memory key padding",
     [] {
         nn::DecoderForwardOptions<double, 3> o;
         o.tgt_mask = nn::generate_square_subsequent_mask<double>(T);
         o.memory_key_padding_mask = ignore_mask(bools({B, S}, 8));
         return decoder_layer<3>(small(false, Act::relu), o, false, 60);
     }},
    {"TransformerDecoderLayer", "pre-norm gelu batch_first, bool memory_mask (N*H,2,3), pos + query_pos",
     [] {
         nn::DecoderForwardOptions<double, 3> o;
         o.memory_mask = ignore_mask(bools({B * H, T, S}, 9));
         o.tgt_key_padding_mask = ignore_mask(bools({B, T}, 10));
         return decoder_layer<3>(small(true, Act::gelu, true), o, true, 70);
     }},
    {"TransformerDecoderLayer", "post-norm relu unbatched, float masks, pos + query_pos",
     [] {
         nn::DecoderForwardOptions<double, 2> o;
         o.tgt_mask = additive_mask(xt::xarray<double>(randn<2>({T, T}, 11)));
         o.memory_mask = additive_mask(xt::xarray<double>(randn<2>({T, S}, 12)));
         return decoder_layer<2>(small(false, Act::relu), o, true, 80);
     }},
    {"TransformerEncoder", "2 post-norm layers + final norm, bool masks",
     [] {
         Generator gen(90);
         const nn::TransformerEncoder<double> enc(EncoderLayer(small(false, Act::relu), gen), 2, nn::LayerNorm<double>(E));
         const auto m = with_random_parameters(enc, 90);
         const auto o = encoder_masks(true);
         return module_gradcheck(m, false, [&](const auto& s, const auto& x) { return flat(s.forward(x, o)); },
                                 sequence<3>(S, false, 91));
     }},
    {"TransformerEncoder", "3DETR: 2 pre-norm layers without feed-forward, a bool mask per layer, pos, weights",
     [] {
         Generator gen(100);
         auto lo = small(true, Act::relu);
         lo.feed_forward = false;
         const auto m = with_random_parameters(nn::TransformerEncoder<double>(EncoderLayer(lo, gen), 2), 100);
         nn::EncoderForwardOptions<double, 3> o;
         o.layer_masks = {ignore_mask(bools({B, S, S}, 13)), ignore_mask(bools({B, S, S}, 14))};
         o.need_weights = true;
         return module_gradcheck(
             m, false,
             [&](const auto& s, const auto& x, const auto& p) {
                 return output_and_weights(s.forward_with_weights(x, at(o, p)));
             },
             sequence<3>(S, false, 101), sequence<3>(S, false, 102));
     }},
    {"TransformerDecoder", "DETR: 2 post-norm layers, return_intermediate, pos + query_pos, memory key padding",
     [] {
         Generator gen(110);
         const nn::TransformerDecoder<double> dec(DecoderLayer(small(false, Act::relu), gen), 2, nn::LayerNorm<double>(E));
         const auto m = with_random_parameters(dec, 110);
         nn::DecoderForwardOptions<double, 3> o;
         o.memory_key_padding_mask = ignore_mask(bools({B, S}, 15));
         return module_gradcheck(
             m, false,
             [&](const auto& s, const auto& t, const auto& mem, const auto& p, const auto& qp) {
                 auto po = at(o, p);
                 po.query_pos = qp;
                 return flat(s.forward_intermediate(t, mem, po));
             },
             sequence<3>(T, false, 111), sequence<3>(S, false, 112), sequence<3>(S, false, 113),
             sequence<3>(T, false, 114));
     }},
    {"DetrTransformer", "1+2 post-norm layers, 3 queries, return_intermediate, a padded column; hs and memory",
     [] {
         Generator gen(130);
         const auto m = with_random_parameters(
             nn::DetrTransformer<double>({.layer = small(false, Act::relu), .num_encoder_layers = 1,
                                          .num_decoder_layers = 2, .num_queries = 3, .return_intermediate = true},
                                         gen),
             130);
         xt::xtensor<bool, 3> mask = xt::zeros<bool>({B, std::size_t(2), std::size_t(3)});
         mask(1, 0, 2) = mask(1, 1, 2) = true;
         return module_gradcheck(
             m, false,
             [&](const auto& detr, const auto& features) {
                 const auto r = detr.forward(features, mask);
                 return concat({flat(r.hs), flat(r.memory)}, 0);
             },
             randn<4>({B, E, 2, 3}, 131));
     }},
    {"TransformerDecoder", "3DETR: 2 pre-norm gelu layers batch_first, no final norm, cross-attention weights",
     [] {
         Generator gen(120);
         const nn::TransformerDecoder<double> dec(DecoderLayer(small(true, Act::gelu, true), gen), 2);
         const auto m = with_random_parameters(dec, 120);
         nn::DecoderForwardOptions<double, 3> o;
         o.tgt_mask = nn::generate_square_subsequent_mask<double>(T);
         o.need_weights = true;
         return module_gradcheck(
             m, false,
             [&](const auto& s, const auto& t, const auto& mem) {
                 return output_and_weights(s.forward_with_weights(t, mem, o));
             },
             sequence<3>(T, true, 121), sequence<3>(S, true, 122));
     }},
    {"Transformer", "1 + 1 pre-norm layers batch_first, all six masks",
     [] {
         Generator gen(130);
         nn::TransformerOptions to;
         to.layer = small(true, Act::relu, true);
         to.num_encoder_layers = to.num_decoder_layers = 1;
         const auto m = with_random_parameters(nn::Transformer<double>(to, gen), 130);
         nn::TransformerForwardOptions<double> o;
         o.src_mask = ignore_mask(bools({S, S}, 16)), o.tgt_mask = nn::generate_square_subsequent_mask<double>(T);
         o.memory_mask = additive_mask(xt::xarray<double>(randn<2>({T, S}, 17)));
         o.src_key_padding_mask = ignore_mask(bools({B, S}, 18));
         o.tgt_key_padding_mask = ignore_mask(bools({B, T}, 19));
         o.memory_key_padding_mask = ignore_mask(bools({B, S}, 20));
         return module_gradcheck(
             m, false, [&](const auto& model, const auto& s, const auto& t) { return flat(model.forward(s, t, o)); },
             sequence<3>(S, true, 131), sequence<3>(T, true, 132));
     }},
    {"flatten_feature_map", "(2,3,2,3) -> (6,2,3)",
     [] { return gradcheck([](const auto& x) { return nn::flatten_feature_map(x); }, randn<4>({2, 3, 2, 3}, 140)); }},
    {"unflatten_feature_map", "(6,2,3) -> (2,3,2,3)",
     [] { return gradcheck([](const auto& y) { return nn::unflatten_feature_map(y, 2, 3); }, randn<3>({6, 2, 3}, 141)); }},
    {"AdditiveAttention", "queries (2,2,3), keys (2,4,2), values (2,4,3), 5 hidden, no valid_lens",
     [] { return additive_attention<1>(std::nullopt, 0, 150); }},
    {"AdditiveAttention", "valid_lens (B) = [2, 0] (a fully masked batch), dropout 0.3 in training",
     [] { return additive_attention(std::optional(xt::xtensor<std::int64_t, 1>{2, 0}), 0.3, 160); }},
    {"AdditiveAttention", "valid_lens (B, Q) = [[1, 4], [3, 2]]",
     [] { return additive_attention(std::optional(xt::xtensor<std::int64_t, 2>{{1, 4}, {3, 2}}), 0, 170); }},
}};

}  // namespace
}  // namespace transformer_checks
}  // namespace xgrad::checks
