// nn::TransformerEncoderLayer and nn::TransformerDecoderLayer: torch.nn.TransformerEncoderLayer and
// TransformerDecoderLayer of PyTorch 1.13 (their regular path, not the inference fast path), built
// from MultiheadAttention, Linear, LayerNorm and Dropout, with DETR's and 3DETR's variants as
// options of the same layers:
//
//   post-norm (norm_first = false)             pre-norm (norm_first = true; DETR/3DETR normalize_before)
//   x = norm1(x + dropout1(SA(x)))             x = x + dropout1(SA(norm1(x)))
//   x = norm2(x + dropout2(CA(x, mem)))        x = x + dropout2(CA(norm2(x), mem))     (decoder only)
//   x = normF(x + dropoutF(FF(x)))             x = x + dropoutF(FF(normF(x)))          (F = 2 enc., 3 dec.)
//
//   SA(h)      = self_attn(h + pos, h + pos, h)                 (decoder: query_pos instead of pos)
//   CA(h, mem) = multihead_attn(h + query_pos, mem + pos, mem)
//   FF(h)      = linear2(dropout(activation(linear1(h))))
//
// pos / query_pos (DETR) are added to queries and keys at every layer, never to values; absent, a
// layer is exactly torch's. 3DETR: attention_dropout (its dropout_attn) for the attentions,
// feed_forward = false (its use_ffn) for an encoder layer without FF, norm2, linear1/2, and the
// attention weights of every layer (need_weights: the encoder's self-attention, the decoder's
// cross-attention, averaged over heads, as 3DETR reads them).
//
// Masks are MultiheadAttention's (ops/mask.hpp, docs/masking.md): ignore_mask(m) is torch's bool
// mask (true = ignore), additive_mask(b) its float mask; attention masks (L, S) or (N·nhead, L, S).
// A fully masked query row gives zero attention (the attention output is out_proj.bias), never NaN.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

enum class Activation { relu, gelu };  // torch's "relu" (F.relu) and "gelu" (F.gelu, the erf form)

// torch's constructor arguments (d_model and nhead have no default there either), plus the variants.
struct TransformerLayerOptions {
    std::size_t d_model = 0, nhead = 0;
    std::size_t dim_feedforward = 2048;
    double dropout = 0.1;
    std::optional<double> attention_dropout{};  // 3DETR's dropout_attn; nullopt: `dropout`, as torch
    Activation activation = Activation::relu;   // or a function: the layers' constructors take one
    double layer_norm_eps = 1e-5;
    bool batch_first = false;  // (N, L, E) instead of (L, N, E)
    bool norm_first = false;   // pre-norm (DETR's and 3DETR's normalize_before)
    bool feed_forward = true;  // false: 3DETR's encoder layer without feed-forward block (use_ffn)
};

// A user's activation, applied to linear1's output (L, N, F) or (N, L, F); unbatched input is
// passed as (L, 1, F).
template <Real T>
using ActivationFunction = std::function<Var<T, 3>(const Var<T, 3>&)>;

// The forward arguments of the encoder layer and stack (torch's names).
template <Real T, std::size_t N>
struct EncoderForwardOptions {
    AnyMask<T> src_mask{};              // (S, S) or (N·nhead, S, S); unbatched: (S, S) or (nhead, S, S)
    AnyMask<T> src_key_padding_mask{};  // (N, S) / (S)
    Var<T, N> pos{};                    // DETR: added to queries and keys of every layer
    bool need_weights = false;          // return each layer's self-attention weights
    // Stack only (3DETR): one mask per layer instead of src_mask, each (N, S, S), shared by every
    // head of sequence n (3DETR tiles it to (N·nhead, S, S) in n·nhead + h order; the stack reads
    // it without the copy: src_mask_per_sequence).
    std::vector<AnyMask<T>> layer_masks{};
    // src_mask is one mask per sequence, (N, S, S) (unbatched: (1, S, S)), shared by its heads.
    bool src_mask_per_sequence = false;
};

template <Real T, std::size_t N>
struct DecoderForwardOptions {
    AnyMask<T> tgt_mask{};                 // (T, T) or (N·nhead, T, T)
    AnyMask<T> memory_mask{};              // (T, S) or (N·nhead, T, S)
    AnyMask<T> tgt_key_padding_mask{};     // (N, T) / (T)
    AnyMask<T> memory_key_padding_mask{};  // (N, S) / (S)
    Var<T, N> pos{};                       // DETR: added to memory as cross-attention keys
    Var<T, N> query_pos{};                 // DETR: added to tgt as self-attention queries and keys, cross-attention queries
    bool need_weights = false;             // return each layer's cross-attention weights
    bool average_attn_weights = true;      // false: per head instead (attn_weights_per_head)
    // TransformerDecoder::forward_with_weights: also every layer's normed output, stacked
    // (`intermediate`), beside the weights (3DETR's decoder returns both). Needs the final norm.
    bool return_intermediate = false;
};

// A layer's output and, with need_weights, its attention weights averaged over heads:
// (N, L, S) batched, (L, S) unbatched.
template <Real T, std::size_t N>
struct TransformerLayerOutput {
    Var<T, N> output;
    Var<T, N> attn_weights;
    Var<T, N + 1> attn_weights_per_head;  // decoder, average_attn_weights = false: (N, H, L, S) / (H, L, S)
};

namespace detail {

inline void check_layer_options(const TransformerLayerOptions& o, const char* layer) {
    auto fail = [&](const std::string& what) { throw value_error(std::string(layer) + ": " + what); };
    if (o.d_model == 0 || o.nhead == 0 || o.dim_feedforward == 0)
        fail("d_model, nhead and dim_feedforward must be positive, got " + std::to_string(o.d_model) + ", " +
             std::to_string(o.nhead) + " and " + std::to_string(o.dim_feedforward));
    if (o.d_model % o.nhead != 0)
        fail("d_model " + std::to_string(o.d_model) + " is not divisible by nhead " + std::to_string(o.nhead));
    const double pa = o.attention_dropout.value_or(o.dropout);
    if (!(o.dropout >= 0 && o.dropout <= 1 && pa >= 0 && pa <= 1))
        fail("dropout and attention_dropout must be in [0, 1], got " + std::to_string(o.dropout) + " and " +
             std::to_string(pa));
}

template <Real T>
MultiheadAttention<T> layer_attention(const TransformerLayerOptions& o, Generator& init_gen) {
    MultiheadAttentionOptions a;
    a.embed_dim = o.d_model, a.num_heads = o.nhead, a.batch_first = o.batch_first;
    a.dropout = o.attention_dropout.value_or(o.dropout);
    return MultiheadAttention<T>(a, init_gen);
}

// x + pos, or x when pos is absent (DETR's with_pos_embed).
template <Real T, std::size_t N>
Var<T, N> with_pos(const Var<T, N>& x, const Var<T, N>& pos) {
    if (!pos) return x;
    return x + pos;
}

// One sublayer with its residual connection, in either norm order (the sum and dropout in one
// node, Dropout::add): pre-norm x + dropout(f(norm(x))), post-norm norm(x + dropout(f(x))). When a
// hook wants the sublayer's part, dropout(f(..)), it goes through hook point `hook` (one more node).
template <Real T, std::size_t N, class F>
Var<T, N> residual(const Var<T, N>& x, const LayerNorm<T>& norm, const Dropout& drop, bool norm_first, F&& sublayer,
                   std::string_view hook) {
    const Var<T, N> in = norm_first ? norm(x) : x;
    Var<T, N> sum = hook_wanted(hook) ? x + hook_point(drop(Var<T, N>(sublayer(in))), hook)
                                      : drop.add(x, Var<T, N>(sublayer(in)));
    return norm_first ? sum : norm(sum);
}

// One attention of a layer: its output, and when asked its weights into `out`: head-averaged
// (attn_weights) or, with `per_head`, every head's (attn_weights_per_head).
template <Real T, std::size_t N>
Var<T, N> attend(const MultiheadAttention<T>& mha, const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v,
                 const AnyMask<T>& attn_mask, const AnyMask<T>& key_padding_mask, bool need_weights,
                 TransformerLayerOutput<T, N>* out = nullptr, bool per_head = false, bool mask_per_sequence = false) {
    MhaForwardOptions<T> fo;
    fo.attn_mask = attn_mask, fo.key_padding_mask = key_padding_mask;
    fo.attn_mask_per_sequence = mask_per_sequence;
    fo.need_weights = need_weights && out;
    fo.average_attn_weights = !per_head;
    auto r = mha.forward(q, k, v, fo);
    if (fo.need_weights && per_head) out->attn_weights_per_head = r.attn_weights_per_head;
    else if (fo.need_weights) out->attn_weights = r.attn_weights;
    return r.output;
}

// The layer's input checks: constructed, and the last dim of `x` is d_model.
template <Real T, std::size_t N>
void check_layer_input(const MultiheadAttention<T>& attn, const Var<T, N>& x, const char* layer, const char* name) {
    static_assert(N == 2 || N == 3, "xgrad: Transformer layers take batched (rank 3) or unbatched (rank 2) inputs");
    if (!attn.out_proj.weight)
        throw value_error(std::string(layer) + ": the layer has no parameters (construct it with options and a Generator)");
    xgrad::require_var(x, layer, name);
    if (x.shape(N - 1) != attn.embed_dim())
        throw shape_error(std::string(layer) + ": " + name + " has shape " + shape_str(x.shape()) +
                          " but its last dim must be d_model = " + std::to_string(attn.embed_dim()));
}

// The feed-forward block and activation both layers share (they have the same member names).
// relu and gelu run inside linear1's node (linear with an activation, ops/linalg.hpp).
template <class Layer, Real T, std::size_t N>
Var<T, N> feed_forward(const Layer& layer, const Var<T, N>& x) {
    Var<T, N> activated;
    if (layer.activation_function) {
        const Var<T, N> hidden = layer.linear1(x);
        if constexpr (N == 3) {
            activated = layer.activation_function(hidden);
        } else {  // unbatched (L, F) as (L, 1, F)
            const long L = long(hidden.shape(0)), F = long(hidden.shape(1));
            activated = reshape<2>(layer.activation_function(reshape<3>(hidden, {L, 1, F})), {L, F});
        }
    } else {
        activated = layer.linear1(x, layer.options.activation == Activation::gelu ? LinearActivation::gelu
                                                                                   : LinearActivation::relu);
    }
    return layer.linear2(layer.dropout(activated));
}

// Constructs the modules both layers have, as torch: attention(s) first, then linear1, linear2.
template <class Layer>
void build_feed_forward(Layer& l, const TransformerLayerOptions& o, Generator& init_gen) {
    l.linear1 = Linear<typename Layer::value_type>(o.d_model, o.dim_feedforward, init_gen);
    l.dropout = Dropout(o.dropout, init_gen);
    l.linear2 = Linear<typename Layer::value_type>(o.dim_feedforward, o.d_model, init_gen);
}

}  // namespace detail

template <Real T>
struct TransformerEncoderLayer {
    using value_type = T;
    BOOST_HANA_DEFINE_STRUCT(TransformerEncoderLayer,
        (MultiheadAttention<T>, self_attn),
        (Linear<T>, linear1),  // (dim_feedforward, d_model); absent without feed_forward
        (Dropout, dropout),
        (Linear<T>, linear2),  // (d_model, dim_feedforward)
        (LayerNorm<T>, norm1),
        (LayerNorm<T>, norm2),  // absent without feed_forward
        (Dropout, dropout1),
        (Dropout, dropout2));
    TransformerLayerOptions options;
    ActivationFunction<T> activation_function;  // empty: options.activation

    TransformerEncoderLayer() = default;
    // torch's initialization: self_attn, linear1, linear2 as their modules, drawn from init_gen in
    // that order; every dropout (and the attention's) owns a generator seeded from init_gen.
    TransformerEncoderLayer(const TransformerLayerOptions& o, Generator& init_gen) : options(o) {
        detail::check_layer_options(o, "TransformerEncoderLayer");
        self_attn = detail::layer_attention<T>(o, init_gen);
        if (o.feed_forward) {
            detail::build_feed_forward(*this, o, init_gen);
            norm2 = LayerNorm<T>(o.d_model, o.layer_norm_eps);
            dropout2 = Dropout(o.dropout, init_gen);
        }
        norm1 = LayerNorm<T>(o.d_model, o.layer_norm_eps);
        dropout1 = Dropout(o.dropout, init_gen);
    }
    TransformerEncoderLayer(const TransformerLayerOptions& o, ActivationFunction<T> activation, Generator& init_gen)
        : TransformerEncoderLayer(o, init_gen) {
        activation_function = std::move(activation);
    }

    // src (S, N, E) / (N, S, E) if batch_first / (S, E) unbatched -> the same shape
    template <std::size_t N>
    Var<T, N> forward(const Var<T, N>& src, const EncoderForwardOptions<T, N>& o = {}) const {
        return forward_with_weights(src, o).output;
    }

    template <std::size_t N>
    TransformerLayerOutput<T, N> forward_with_weights(const Var<T, N>& src, const EncoderForwardOptions<T, N>& o = {}) const {
        detail::check_layer_input(self_attn, src, "TransformerEncoderLayer", "src");
        if (!o.layer_masks.empty())
            throw value_error("TransformerEncoderLayer: layer_masks are for TransformerEncoder; give the layer src_mask");
        TransformerLayerOutput<T, N> out;
        const auto self_attention = [&](const Var<T, N>& h) {
            const Var<T, N> qk = detail::with_pos(h, o.pos);
            const NameScope scope("self_attn");
            return detail::attend(self_attn, qk, qk, h, o.src_mask, o.src_key_padding_mask, o.need_weights, &out,
                                  false, o.src_mask_per_sequence);
        };
        // hook points (docs/hooks.md): hook_resid_pre, hook_attn_out, hook_resid_mid, hook_mlp_out, hook_resid_post
        const Var<T, N> x = hook_point(src, "hook_resid_pre");
        out.output = detail::residual(x, norm1, dropout1, options.norm_first, self_attention, "hook_attn_out");
        if (options.feed_forward)
            out.output = detail::residual(hook_point(out.output, "hook_resid_mid"), norm2, dropout2, options.norm_first,
                                          [&](const Var<T, N>& h) { return detail::feed_forward(*this, h); },
                                          "hook_mlp_out");
        out.output = hook_point(out.output, "hook_resid_post");
        return out;
    }
};

template <Real T>
struct TransformerDecoderLayer {
    using value_type = T;
    BOOST_HANA_DEFINE_STRUCT(TransformerDecoderLayer,
        (MultiheadAttention<T>, self_attn),
        (MultiheadAttention<T>, multihead_attn),
        (Linear<T>, linear1),
        (Dropout, dropout),
        (Linear<T>, linear2),
        (LayerNorm<T>, norm1),
        (LayerNorm<T>, norm2),
        (LayerNorm<T>, norm3),
        (Dropout, dropout1),
        (Dropout, dropout2),
        (Dropout, dropout3));
    TransformerLayerOptions options;
    ActivationFunction<T> activation_function;  // empty: options.activation

    TransformerDecoderLayer() = default;
    // torch's initialization: self_attn, multihead_attn, linear1, linear2 drawn from init_gen in that order.
    TransformerDecoderLayer(const TransformerLayerOptions& o, Generator& init_gen) : options(o) {
        detail::check_layer_options(o, "TransformerDecoderLayer");
        if (!o.feed_forward)
            throw value_error("TransformerDecoderLayer: feed_forward = false is for the encoder layer (3DETR's use_ffn)");
        self_attn = detail::layer_attention<T>(o, init_gen);
        multihead_attn = detail::layer_attention<T>(o, init_gen);
        detail::build_feed_forward(*this, o, init_gen);
        norm1 = LayerNorm<T>(o.d_model, o.layer_norm_eps);
        norm2 = LayerNorm<T>(o.d_model, o.layer_norm_eps);
        norm3 = LayerNorm<T>(o.d_model, o.layer_norm_eps);
        dropout1 = Dropout(o.dropout, init_gen), dropout2 = Dropout(o.dropout, init_gen);
        dropout3 = Dropout(o.dropout, init_gen);
    }
    TransformerDecoderLayer(const TransformerLayerOptions& o, ActivationFunction<T> activation, Generator& init_gen)
        : TransformerDecoderLayer(o, init_gen) {
        activation_function = std::move(activation);
    }

    // tgt (T, N, E), memory (S, N, E) (batch_first: (N, T, E), (N, S, E); unbatched (T, E), (S, E)) -> tgt's shape
    template <std::size_t N>
    Var<T, N> forward(const Var<T, N>& tgt, const Var<T, N>& memory, const DecoderForwardOptions<T, N>& o = {}) const {
        return forward_with_weights(tgt, memory, o).output;
    }

    template <std::size_t N>
    TransformerLayerOutput<T, N> forward_with_weights(const Var<T, N>& tgt, const Var<T, N>& memory,
                                                      const DecoderForwardOptions<T, N>& o = {}) const {
        detail::check_layer_input(self_attn, tgt, "TransformerDecoderLayer", "tgt");
        detail::check_layer_input(self_attn, memory, "TransformerDecoderLayer", "memory");
        TransformerLayerOutput<T, N> out;
        const auto self_attention = [&](const Var<T, N>& h) {
            const Var<T, N> qk = detail::with_pos(h, o.query_pos);
            const NameScope scope("self_attn");
            return detail::attend(self_attn, qk, qk, h, o.tgt_mask, o.tgt_key_padding_mask, false);
        };
        const Var<T, N> memory_key = detail::with_pos(memory, o.pos);
        const auto cross_attention = [&](const Var<T, N>& h) {
            const NameScope scope("multihead_attn");
            return detail::attend(multihead_attn, detail::with_pos(h, o.query_pos), memory_key, memory, o.memory_mask,
                                  o.memory_key_padding_mask, o.need_weights, &out,
                                  !o.average_attn_weights);
        };
        // hook points (docs/hooks.md): hook_resid_pre, hook_attn_out, hook_resid_mid, hook_cross_attn_out,
        // hook_resid_mid_cross, hook_mlp_out, hook_resid_post
        Var<T, N> x = detail::residual(hook_point(tgt, "hook_resid_pre"), norm1, dropout1, options.norm_first,
                                       self_attention, "hook_attn_out");
        x = detail::residual(hook_point(x, "hook_resid_mid"), norm2, dropout2, options.norm_first, cross_attention,
                             "hook_cross_attn_out");
        out.output = detail::residual(hook_point(x, "hook_resid_mid_cross"), norm3, dropout3, options.norm_first,
                                      [&](const Var<T, N>& h) { return detail::feed_forward(*this, h); }, "hook_mlp_out");
        out.output = hook_point(out.output, "hook_resid_post");
        return out;
    }
};

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the layers and their forwards, batched and
// unbatched (every forward entry point ends in one of these).
namespace xgrad {
#define XGRAD_DETAIL_TRANSFORMER_LAYER_COMPILED(EXTERN, T, N)                                                        \
    EXTERN template nn::TransformerLayerOutput<T, N> nn::TransformerEncoderLayer<T>::forward_with_weights<N>(        \
        const Var<T, N>&, const nn::EncoderForwardOptions<T, N>&) const;                                            \
    EXTERN template nn::TransformerLayerOutput<T, N> nn::TransformerDecoderLayer<T>::forward_with_weights<N>(        \
        const Var<T, N>&, const Var<T, N>&, const nn::DecoderForwardOptions<T, N>&) const;
#define XGRAD_DETAIL_TRANSFORMER_LAYERS_COMPILED(EXTERN, T)                 \
    EXTERN template struct nn::TransformerEncoderLayer<T>;                  \
    EXTERN template struct nn::TransformerDecoderLayer<T>;                  \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::TransformerEncoderLayer<T>, T)  \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::TransformerDecoderLayer<T>, T)  \
    XGRAD_DETAIL_TRANSFORMER_LAYER_COMPILED(EXTERN, T, 2)                   \
    XGRAD_DETAIL_TRANSFORMER_LAYER_COMPILED(EXTERN, T, 3)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_TRANSFORMER_LAYERS_COMPILED)
#undef XGRAD_DETAIL_TRANSFORMER_LAYERS_COMPILED
#undef XGRAD_DETAIL_TRANSFORMER_LAYER_COMPILED
}  // namespace xgrad
