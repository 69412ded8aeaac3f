// nn::DetrTransformer: DETR's transformer (facebookresearch/detr, models/transformer.py, class
// Transformer) with the two pieces its DETR model adds around it, so that a feature map goes in and
// the object queries' decodings come out:
//
//   features (B, C, H, W), mask (B, H, W) true = padding
//     -> src (HW, B, C), pos = PositionEmbeddingSine(C/2, normalize) of the mask (HW, B, C)
//     -> encoder (DETR's final norm only with norm_first), key padding = the mask
//     -> decoder of num_queries learned queries (tgt zeros, query_pos = query_embed.weight (Q, C)),
//        every layer's output through the final norm when return_intermediate
//   hs (num_decoder_layers or 1, Q, B, C), memory (B, C, H, W)
//
// DETR computes the positions in its backbone and passes the queries in; here both belong to the
// module (the positions have no parameters). Parameters: encoder.*, decoder.* (xavier_uniform_ on
// every one with more than one dim, as DETR's _reset_parameters) and query_embed.weight (N(0, 1),
// DETR's nn.Embedding).
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/position_embedding.hpp"
#include "xgrad/nn/transformer.hpp"

namespace xgrad::nn {

struct DetrTransformerOptions {
    // DETR's defaults: d_model 512, nhead 8, dim_feedforward 2048, dropout 0.1, relu, post-norm
    // (norm_first = DETR's normalize_before). Sequence-first: batch_first must stay false.
    TransformerLayerOptions layer{.d_model = 512, .nhead = 8};
    std::size_t num_encoder_layers = 6, num_decoder_layers = 6;
    std::size_t num_queries = 100;
    bool return_intermediate = false;  // DETR's return_intermediate_dec (its auxiliary losses)
};

template <Real T>
struct DetrOutput {
    Var<T, 4> hs;      // (num_decoder_layers, Q, B, C) with return_intermediate, else (1, Q, B, C)
    Var<T, 4> memory;  // the encoder's output as a feature map (B, C, H, W)
};

template <Real T>
struct DetrTransformer {
    BOOST_HANA_DEFINE_STRUCT(DetrTransformer, (TransformerEncoder<T>, encoder), (TransformerDecoder<T>, decoder),
                             (Embedding<T>, query_embed));
    DetrTransformerOptions options;
    PositionEmbeddingSine<T> position;

    DetrTransformer() = default;
    DetrTransformer(const DetrTransformerOptions& o, Generator& init_gen) : options(o) {
        const auto& lo = o.layer;
        if (lo.batch_first) throw value_error("DetrTransformer: the layers are sequence-first (batch_first = false)");
        if (lo.d_model % 4 != 0)
            throw value_error("DetrTransformer: d_model must be a multiple of 4 (sine positions: d_model/2 sin and cos "
                              "pairs for y, as many for x), got " + std::to_string(lo.d_model));
        if (o.num_queries == 0) throw value_error("DetrTransformer: num_queries must be positive");
        std::optional<LayerNorm<T>> encoder_norm;
        if (lo.norm_first) encoder_norm.emplace(lo.d_model, lo.layer_norm_eps);
        encoder = TransformerEncoder<T>(TransformerEncoderLayer<T>(lo, init_gen), o.num_encoder_layers, encoder_norm);
        decoder = TransformerDecoder<T>(TransformerDecoderLayer<T>(lo, init_gen), o.num_decoder_layers,
                                        LayerNorm<T>(lo.d_model, lo.layer_norm_eps));
        detail::xavier_uniform_matrices(encoder, init_gen);
        detail::xavier_uniform_matrices(decoder, init_gen);
        query_embed = Embedding<T>(o.num_queries, lo.d_model, init_gen);
        position = PositionEmbeddingSine<T>(lo.d_model / 2, 10000, true);
    }

    // features (B, C = d_model, H, W); mask (B, H, W), true = padding (default: none)
    DetrOutput<T> forward(const Var<T, 4>& features, const xt::xtensor<bool, 3>& mask) const {
        const std::size_t B = features.shape(0), C = features.shape(1), H = features.shape(2), W = features.shape(3);
        if (C != options.layer.d_model || mask.shape(0) != B || mask.shape(1) != H || mask.shape(2) != W)
            throw shape_error("DetrTransformer: features " + shape_str(features.shape()) + " and mask " +
                              shape_str(mask.shape()) + " must be (B, d_model = " + std::to_string(options.layer.d_model) +
                              ", H, W) and (B, H, W)");
        EncoderForwardOptions<T, 3> e;
        e.pos = flatten_feature_map(position(mask));
        e.src_key_padding_mask = ignore_mask(flatten_mask(mask));
        const Var<T, 3> memory = [&] {
            const NameScope scope("encoder");
            return encoder.forward(flatten_feature_map(features), e);
        }();
        const NameScope scope("decoder");
        const std::size_t Q = options.num_queries;
        DecoderForwardOptions<T, 3> d;
        d.pos = e.pos, d.memory_key_padding_mask = e.src_key_padding_mask;
        d.query_pos = expand<3>(reshape<3>(query_embed.weight, {long(Q), 1, long(C)}), {Q, B, C});  // (Q, B, C)
        const auto tgt = constant(xt::xtensor<T, 3>(xt::zeros<T>({Q, B, C})));
        Var<T, 4> hs = options.return_intermediate ? decoder.forward_intermediate(tgt, memory, d)
                                                   : reshape<4>(decoder.forward(tgt, memory, d), {1, long(Q), long(B), long(C)});
        return {std::move(hs), unflatten_feature_map(memory, H, W)};
    }
    DetrOutput<T> forward(const Var<T, 4>& features) const {
        return forward(features, xt::zeros<bool>({features.shape(0), features.shape(2), features.shape(3)}));
    }
};

}  // namespace xgrad::nn
