// nn::TransformerEncoder, nn::TransformerDecoder and nn::Transformer: torch.nn's stacks of the
// layers of nn/transformer_layers.hpp (PyTorch 1.13), with DETR's and 3DETR's stack variants:
//
//   TransformerEncoder(layer, num_layers, norm)   layers.0 ... layers.{n-1}: independent copies of
//                                                 `layer` (equal values, as torch's deepcopy), then
//                                                 the optional final norm
//   TransformerDecoder(layer, num_layers, norm)   the same; forward_intermediate (DETR's and 3DETR's
//                                                 return_intermediate): every layer's output through
//                                                 the final norm, stacked (num_layers, T, N, E)
//   Transformer(options, init_gen)                encoder + decoder, both with a final norm; every
//                                                 parameter with more than one dim xavier_uniform
//
// DETR's final-norm rules are the caller's choice of `norm`: its encoder has one only with
// normalize_before (norm_first), its decoder always. 3DETR: EncoderForwardOptions::layer_masks gives
// each layer its own (N, S, S) mask, shared by the heads (as 3DETR's tiling over the heads, without
// the copy), and forward_with_weights returns every layer's attention weights. A plain copy of a layer or stack
// shares its tensors and generators (nn/clone.hpp); nn::clone makes an independent one.
// State-dict names are torch's: encoder.layers.0.self_attn.in_proj_weight, decoder.norm.weight, ...
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/nn/clone.hpp"
#include "xgrad/nn/transformer_layers.hpp"
#include "xgrad/ops/shape_concat.hpp"

namespace xgrad::nn {

// torch.nn.Transformer.generate_square_subsequent_mask: (sz, sz), -inf above the diagonal (key j > query i), 0 elsewhere.
template <Real T>
AdditiveMask<T> generate_square_subsequent_mask(std::size_t sz) {
    xt::xarray<T> bias = xt::zeros<T>({sz, sz});
    for (std::size_t i = 0; i < sz; ++i)
        for (std::size_t j = i + 1; j < sz; ++j) bias(i, j) = -std::numeric_limits<T>::infinity();
    return {std::move(bias)};
}

namespace detail {

// xavier_uniform_ on every parameter of m with more than one dim, in state-dict order (torch's
// Transformer._reset_parameters, DETR's).
template <class M>
void xavier_uniform_matrices(M& m, Generator& gen) {
    for_each_parameter(m, [&](const std::string&, auto& p) {
        if constexpr (std::remove_cvref_t<decltype(p)>::rank > 1) init::xavier_uniform_(p, gen);
    });
}

// xs[0..k) of one shape -> (k, shape...)
template <Real T, std::size_t N>
Var<T, N + 1> stack_layers(const std::vector<Var<T, N>>& xs) {
    std::vector<Var<T, N + 1>> rows;
    for (const auto& x : xs) {
        std::array<long, N + 1> shape{1};
        for (std::size_t k = 0; k < N; ++k) shape[k + 1] = long(x.shape(k));
        rows.push_back(reshape<N + 1>(x, shape));
    }
    return concat(rows, 0);
}

inline void check_num_layers(std::size_t num_layers, const char* stack) {
    if (num_layers == 0) throw value_error(std::string(stack) + ": num_layers must be positive");
}

}  // namespace detail

// A stack's output: the final output (through the final norm if any) and, with need_weights,
// each layer's attention weights (nn/transformer_layers.hpp): head-averaged, or for the decoder
// with average_attn_weights = false, per head.
template <Real T, std::size_t N>
struct TransformerStackOutput {
    Var<T, N> output;
    std::vector<Var<T, N>> attn_weights;
    std::vector<Var<T, N + 1>> attn_weights_per_head;
    Var<T, N + 1> intermediate{};  // the decoder's, with return_intermediate: (num_layers, T, N, E)
};

template <Real T>
struct TransformerEncoder {
    BOOST_HANA_DEFINE_STRUCT(TransformerEncoder,
        (std::vector<TransformerEncoderLayer<T>>, layers),
        (std::optional<LayerNorm<T>>, norm));  // the final norm, if any

    TransformerEncoder() = default;
    // torch.nn.TransformerEncoder(encoder_layer, num_layers, norm): the layers are nn::clones of
    // `layer`; `norm` is taken as given (shared, as torch).
    TransformerEncoder(const TransformerEncoderLayer<T>& layer, std::size_t num_layers,
                       std::optional<LayerNorm<T>> final_norm = std::nullopt)
        : layers((detail::check_num_layers(num_layers, "TransformerEncoder"), clones(layer, num_layers))),
          norm(std::move(final_norm)) {}

    template <std::size_t N>
    Var<T, N> forward(const Var<T, N>& src, const EncoderForwardOptions<T, N>& o = {}) const {
        return forward_with_weights(src, o).output;
    }

    template <std::size_t N>
    TransformerStackOutput<T, N> forward_with_weights(const Var<T, N>& src, const EncoderForwardOptions<T, N>& o = {}) const {
        if (layers.empty()) throw value_error("TransformerEncoder: the stack has no layers (construct it with a layer)");
        if (!o.layer_masks.empty() && o.layer_masks.size() != layers.size())
            throw value_error("TransformerEncoder: layer_masks has " + std::to_string(o.layer_masks.size()) +
                              " masks for " + std::to_string(layers.size()) + " layers");
        if (!o.layer_masks.empty() && o.src_mask)
            throw value_error("TransformerEncoder: give src_mask or layer_masks, not both");
        TransformerStackOutput<T, N> out;
        // 3DETR's layer masks are read per sequence, not tiled over the heads: a step copies no mask.
        EncoderForwardOptions<T, N> per_layer{o.src_mask, o.src_key_padding_mask, o.pos, o.need_weights, {},
                                              o.src_mask_per_sequence || !o.layer_masks.empty()};
        Var<T, N> x = src;
        for (std::size_t i = 0; i < layers.size(); ++i) {
            if (!o.layer_masks.empty()) per_layer.src_mask = o.layer_masks[i];
            const NameScope in_layers("layers"), in_layer(index_name(i));
            auto r = layers[i].forward_with_weights(x, per_layer);
            x = r.output;
            if (o.need_weights) out.attn_weights.push_back(r.attn_weights);
        }
        out.output = norm ? (*norm)(x) : x;
        return out;
    }
};

template <Real T>
struct TransformerDecoder {
    BOOST_HANA_DEFINE_STRUCT(TransformerDecoder,
        (std::vector<TransformerDecoderLayer<T>>, layers),
        (std::optional<LayerNorm<T>>, norm));  // the final norm, if any

    TransformerDecoder() = default;
    TransformerDecoder(const TransformerDecoderLayer<T>& layer, std::size_t num_layers,
                       std::optional<LayerNorm<T>> final_norm = std::nullopt)
        : layers((detail::check_num_layers(num_layers, "TransformerDecoder"), clones(layer, num_layers))),
          norm(std::move(final_norm)) {}

    // tgt (T, N, E), memory (S, N, E) (or batch_first, or unbatched) -> tgt's shape
    template <std::size_t N>
    Var<T, N> forward(const Var<T, N>& tgt, const Var<T, N>& memory, const DecoderForwardOptions<T, N>& o = {}) const {
        return forward_with_weights(tgt, memory, o).output;
    }

    // DETR's return_intermediate: norm(output of layer i) for every i, stacked (num_layers, T, N, E);
    // the last entry is the decoder's output. Needs the final norm.
    template <std::size_t N>
    Var<T, N + 1> forward_intermediate(const Var<T, N>& tgt, const Var<T, N>& memory,
                                       const DecoderForwardOptions<T, N>& o = {}) const {
        DecoderForwardOptions<T, N> with_intermediate = o;
        with_intermediate.return_intermediate = true;
        return forward_with_weights(tgt, memory, with_intermediate).intermediate;
    }

    // The output, with need_weights every layer's cross-attention weights, and with
    // return_intermediate the stack forward_intermediate returns, from one pass.
    template <std::size_t N>
    TransformerStackOutput<T, N> forward_with_weights(const Var<T, N>& tgt, const Var<T, N>& memory,
                                                      const DecoderForwardOptions<T, N>& o = {}) const {
        if (!o.return_intermediate) return run<N>(tgt, memory, o, nullptr);
        if (!norm)
            throw value_error("TransformerDecoder: return_intermediate needs the final norm (construct the decoder with one)");
        std::vector<Var<T, N>> normed;
        auto out = run<N>(tgt, memory, o, &normed);
        out.intermediate = detail::stack_layers(normed);
        return out;
    }

private:
    // Runs the layers; `intermediate`, when given, receives norm(output of every layer).
    template <std::size_t N>
    TransformerStackOutput<T, N> run(const Var<T, N>& tgt, const Var<T, N>& memory, const DecoderForwardOptions<T, N>& o,
                                     std::vector<Var<T, N>>* intermediate) const {
        if (layers.empty()) throw value_error("TransformerDecoder: the stack has no layers (construct it with a layer)");
        TransformerStackOutput<T, N> out;
        Var<T, N> x = tgt;
        for (std::size_t i = 0; i < layers.size(); ++i) {
            const NameScope in_layers("layers"), in_layer(index_name(i));
            auto r = layers[i].forward_with_weights(x, memory, o);
            x = r.output;
            if (o.need_weights && o.average_attn_weights) out.attn_weights.push_back(r.attn_weights);
            if (o.need_weights && !o.average_attn_weights) out.attn_weights_per_head.push_back(r.attn_weights_per_head);
            if (intermediate) intermediate->push_back((*norm)(x));
        }
        out.output = intermediate ? intermediate->back() : norm ? (*norm)(x) : x;
        return out;
    }
};

struct TransformerOptions {
    TransformerLayerOptions layer{.d_model = 512, .nhead = 8};  // torch's defaults (dim_feedforward 2048, ...)
    std::size_t num_encoder_layers = 6, num_decoder_layers = 6;
};

// The forward arguments of nn::Transformer (torch's names); masks as in the layers.
template <Real T>
struct TransformerForwardOptions {
    AnyMask<T> src_mask{}, tgt_mask{}, memory_mask{};
    AnyMask<T> src_key_padding_mask{}, tgt_key_padding_mask{}, memory_key_padding_mask{};
};

template <Real T>
struct Transformer {
    BOOST_HANA_DEFINE_STRUCT(Transformer, (TransformerEncoder<T>, encoder), (TransformerDecoder<T>, decoder));
    TransformerOptions options;

    Transformer() = default;
    // torch.nn.Transformer: the layers as their defaults, both stacks with a final LayerNorm, then
    // xavier_uniform_ on every parameter with more than one dim (in state-dict order, from init_gen).
    Transformer(const TransformerOptions& o, Generator& init_gen) : options(o) {
        const auto& lo = o.layer;
        if (!lo.feed_forward) throw value_error("Transformer: feed_forward = false is for a TransformerEncoderLayer");
        encoder = TransformerEncoder<T>(TransformerEncoderLayer<T>(lo, init_gen), o.num_encoder_layers,
                                        LayerNorm<T>(lo.d_model, lo.layer_norm_eps));
        decoder = TransformerDecoder<T>(TransformerDecoderLayer<T>(lo, init_gen), o.num_decoder_layers,
                                        LayerNorm<T>(lo.d_model, lo.layer_norm_eps));
        detail::xavier_uniform_matrices(*this, init_gen);
    }

    // src (S, N, E), tgt (T, N, E) (batch_first: (N, S, E), (N, T, E); unbatched (S, E), (T, E)) -> (T, N, E)
    template <std::size_t N>
    Var<T, N> forward(const Var<T, N>& src, const Var<T, N>& tgt, const TransformerForwardOptions<T>& o = {}) const {
        const std::size_t batch_axis = options.layer.batch_first ? 0 : 1;
        if (N == 3 && src.shape(batch_axis) != tgt.shape(batch_axis))
            throw shape_error("Transformer: src " + shape_str(src.shape()) + " and tgt " + shape_str(tgt.shape()) +
                              " need the same batch size" + (options.layer.batch_first ? " (axis 0)" : " (axis 1)"));
        EncoderForwardOptions<T, N> eo;
        eo.src_mask = o.src_mask, eo.src_key_padding_mask = o.src_key_padding_mask;
        const Var<T, N> memory = [&] {
            const NameScope scope("encoder");
            return encoder.forward(src, eo);
        }();
        const NameScope scope("decoder");
        DecoderForwardOptions<T, N> d;
        d.tgt_mask = o.tgt_mask, d.memory_mask = o.memory_mask;
        d.tgt_key_padding_mask = o.tgt_key_padding_mask, d.memory_key_padding_mask = o.memory_key_padding_mask;
        return decoder.forward(tgt, memory, d);
    }

    static AdditiveMask<T> generate_square_subsequent_mask(std::size_t sz) { return nn::generate_square_subsequent_mask<T>(sz); }
};

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the stacks and nn.Transformer, batched and
// unbatched.
namespace xgrad {
#define XGRAD_DETAIL_TRANSFORMER_STACK_COMPILED(EXTERN, T, N)                                                        \
    EXTERN template nn::TransformerStackOutput<T, N> nn::TransformerEncoder<T>::forward_with_weights<N>(             \
        const Var<T, N>&, const nn::EncoderForwardOptions<T, N>&) const;                                            \
    EXTERN template nn::TransformerStackOutput<T, N> nn::TransformerDecoder<T>::forward_with_weights<N>(             \
        const Var<T, N>&, const Var<T, N>&, const nn::DecoderForwardOptions<T, N>&) const;                          \
    EXTERN template Var<T, N> nn::Transformer<T>::forward<N>(const Var<T, N>&, const Var<T, N>&,                      \
                                                            const nn::TransformerForwardOptions<T>&) const;
#define XGRAD_DETAIL_TRANSFORMER_STACKS_COMPILED(EXTERN, T)                 \
    EXTERN template struct nn::TransformerEncoder<T>;                       \
    EXTERN template struct nn::TransformerDecoder<T>;                       \
    EXTERN template struct nn::Transformer<T>;                              \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::TransformerEncoder<T>, T)       \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::TransformerDecoder<T>, T)       \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::Transformer<T>, T)              \
    XGRAD_DETAIL_TRANSFORMER_STACK_COMPILED(EXTERN, T, 2)                   \
    XGRAD_DETAIL_TRANSFORMER_STACK_COMPILED(EXTERN, T, 3)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_TRANSFORMER_STACKS_COMPILED)
#undef XGRAD_DETAIL_TRANSFORMER_STACKS_COMPILED
#undef XGRAD_DETAIL_TRANSFORMER_STACK_COMPILED
}  // namespace xgrad
