// nn::Llama: the Llama 2 decoder as llama2.c's model.py writes it, under its state-dict names.
//
//   h      = dropout(tok_embeddings(tokens))                                     (B, T, dim)
//   h     += resid_dropout(wo(attention(rope(wq(x)), rope(wk(x)), wv(x))))     x = attention_norm(h):
//            causal, n_heads query heads over n_kv_heads key/value heads (grouped-query attention)
//   h     += dropout(w2(silu(w1(x)) ⊙ w3(x)))                                   x = ffn_norm(h)
//   logits = output(norm(h))                                                     (B, T, vocab_size)
//
// tok_embeddings.weight, layers.{i}.attention.wq.weight (n_heads·head_dim, dim), .wk / .wv
// (n_kv_heads·head_dim, dim), .wo, layers.{i}.feed_forward.w1 / w3 (hidden, dim), .w2 (dim, hidden),
// layers.{i}.attention_norm.weight, layers.{i}.ffn_norm.weight, norm.weight, output.weight (the
// same tensor as tok_embeddings.weight when tied, as model.py; a state dict holds both names). No
// biases. rope is the interleaved rotary embedding (ops/rotary.hpp) of model.py's
// precompute_freqs_cis, computed in the value type.
//
// Hook points (TransformerLens's names): hook_embed, blocks.{i}.hook_resid_pre, .attn.hook_q / hook_k
// / hook_v (before the rotary embedding; k and v with the n_kv_heads heads), .attn.hook_rot_q /
// hook_rot_k (after it), the attention's own (hook_attn_scores, hook_pattern, hook_z),
// .hook_attn_out, .hook_resid_mid, .mlp.hook_pre (w1's output), .mlp.hook_pre_linear (w3's),
// .mlp.hook_post (their gated product), .hook_mlp_out, .hook_resid_post, ln_final.hook_normalized.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/names.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/decoder.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/llama_config.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/linear_cross_entropy.hpp"
#include "xgrad/ops/rotary.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

// A SwiGLU feed-forward (Shazeer 2020; Llama's FeedForward): dropout(w2(silu(w1(x)) ⊙ w3(x))), the
// Linears without bias; the gated product is one fused elementwise node.
template <Real T>
struct SwiGLU {
    BOOST_HANA_DEFINE_STRUCT(SwiGLU, (Linear<T>, w1), (Linear<T>, w2), (Linear<T>, w3), (Dropout, dropout));

    SwiGLU() = default;
    // dim -> hidden -> dim; hidden from swiglu_hidden_dim (llama_config.hpp) for Llama's sizes.
    SwiGLU(std::size_t dim, std::size_t hidden, Generator& gen, double p = 0)
        : w1(dim, hidden, gen, false), w2(hidden, dim, gen, false), w3(dim, hidden, gen, false), dropout(p, gen) {}

    // silu(w1(x)) ⊙ w3(x) (..., hidden), through hook points hook_pre, hook_pre_linear, hook_post
    template <std::size_t N>
    Var<T, N> gated(const Var<T, N>& x) const {
        const Var<T, N> pre = hook_point(w1(x), "hook_pre"), pre_linear = hook_point(w3(x), "hook_pre_linear");
        return hook_point(Var<T, N>(silu(pre) * pre_linear), "hook_post");
    }
    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        return dropout(w2(gated(x)));
    }
};

// model.py's Attention: wq, wk, wv, the rotary embedding of q and k, the causal grouped-query
// attention, wo.
template <Real T>
struct LlamaAttention {
    BOOST_HANA_DEFINE_STRUCT(LlamaAttention, (Linear<T>, wq), (Linear<T>, wk), (Linear<T>, wv), (Linear<T>, wo),
                             (std::shared_ptr<Generator>, attn_dropout), (Dropout, resid_dropout));
    std::size_t n_heads = 1, n_kv_heads = 1;
    double dropout = 0;
    bool training = true;

    // residual + resid_dropout(wo(attention(x))) in (B, T, dim), positions [first, first + T) turned
    // by `rope`; first = cache->before with a cache. The weights (B·n_heads, T, S) into *weights when asked.
    Var<T, 3> add_to(const Var<T, 3>& residual, const Var<T, 3>& x, const RotaryTables<T>& rope,
                     const LanguageModelOptions& o, Var<T, 3>* weights, const KeyValueSource<T>* cache = nullptr) const;
};

template <Real T>
struct LlamaBlock {
    BOOST_HANA_DEFINE_STRUCT(LlamaBlock, (LlamaAttention<T>, attention), (SwiGLU<T>, feed_forward),
                             (RMSNorm<T>, attention_norm), (RMSNorm<T>, ffn_norm));

    Var<T, 3> operator()(const Var<T, 3>& x, const RotaryTables<T>& rope, const LanguageModelOptions& o = {},
                         Var<T, 3>* weights = nullptr, const KeyValueSource<T>* cache = nullptr) const {
        const Var<T, 3> in = hook_point(x, "hook_resid_pre");
        const Var<T, 3> h = hook_point(attention.add_to(in, attention_norm(in), rope, o, weights, cache), "hook_resid_mid");
        Var<T, 3> gated;
        {
            const NameScope in_mlp("", "mlp");
            gated = feed_forward.gated(ffn_norm(h));
        }
        return hook_point(detail::project_add(h, feed_forward.w2, feed_forward.dropout, gated, "hook_mlp_out"),
                          "hook_resid_post");
    }
};

template <Real T>
struct Llama {
    BOOST_HANA_DEFINE_STRUCT(Llama, (Embedding<T>, tok_embeddings), (Dropout, dropout),
                             (std::vector<LlamaBlock<T>>, layers), (RMSNorm<T>, norm), (Linear<T>, output));
    LlamaConfig config;
    using value_type = T;
    RotaryTables<T> rope;  // model.py's freqs_cos and freqs_sin (max_seq_len, head_dim / 2): not parameters

    Llama() = default;
    // model.py's init: Linear and Embedding weights ~ N(0, 0.02), w3 and wo ~ N(0, 0.02/√(2·n_layers)),
    // RMSNorm weights 1; output tied to tok_embeddings unless config.tie_embeddings is false.
    Llama(const LlamaConfig& c, Generator& gen);

    // logits (B, T, vocab_size) of tokens (B, T), T <= max_seq_len, every id in [0, vocab_size).
    Var<T, 3> operator()(const xt::xtensor<std::int64_t, 2>& tokens) const { return forward(tokens).logits; }
    LanguageModelOutput<T> forward(const xt::xtensor<std::int64_t, 2>& tokens, const LanguageModelOptions& o = {}) const;
    // model.py's loss (mean cross-entropy, target -1 ignored) with output and the loss in one op.
    Var<T, 0> loss(const xt::xtensor<std::int64_t, 2>& tokens, const xt::xtensor<std::int64_t, 2>& targets,
                   const LanguageModelOptions& o = {}) const;
    // The final hidden states (B, T, dim) after norm, for positions [first, first + T); `caches` (one
    // per layer) give the earlier positions' keys and values.
    Var<T, 3> hidden(const xt::xtensor<std::int64_t, 2>& tokens, const LanguageModelOptions& o,
                     std::vector<Var<T, 3>>* weights, std::size_t first = 0,
                     const std::vector<KeyValueSource<T>>* caches = nullptr) const;
    // What hidden() runs after the embedding, from layer `layer` on: the residual stream x (B, T, dim)
    // at blocks.{layer}.hook_resid_pre through the layers and norm. Activation patching resumes here.
    Var<T, 3> resume(std::size_t layer, Var<T, 3> x, const LanguageModelOptions& o = {},
                     std::vector<Var<T, 3>>* weights = nullptr, std::size_t first = 0,
                     const std::vector<KeyValueSource<T>>* caches = nullptr) const;

    // For nn::generate (CachedDecoder) and patching: the sizes, the output layer, the final norm.
    DecodingShape decoding() const {
        return {config.max_seq_len, layers.size(), config.kv_heads() * config.head_dim(), config.vocab_size,
                config.n_heads, config.dim};
    }
    const Var<T, 2>& unembedding() const { return output.weight; }
    const RMSNorm<T>& final_norm() const { return norm; }

    // Every parameter once (the tied output counted once).
    std::size_t num_params() const { return parameter_count(*this); }
};

// ---- out of the class: libxgrad compiles them once for float and double (XGRAD_COMPILED_IN below) ----

template <Real T>
Llama<T>::Llama(const LlamaConfig& c, Generator& gen) : config(c) {
    c.validate();
    const std::size_t dim = c.dim, D = c.head_dim(), H = c.n_heads, Hkv = c.kv_heads();
    const double std_residual = 0.02 / std::sqrt(2.0 * double(c.n_layers));
    auto linear = [&](std::size_t in, std::size_t out, double std) {
        Linear<T> l(in, out, gen, false);
        init::normal_(l.weight, 0, std, gen);
        return l;
    };
    auto norm_layer = [&] { return RMSNorm<T>(dim, c.norm_eps); };
    tok_embeddings = Embedding<T>(c.vocab_size, dim, gen);
    init::normal_(tok_embeddings.weight, 0, 0.02, gen);
    dropout = Dropout(c.dropout, gen);
    layers.resize(c.n_layers);
    for (auto& layer : layers) {
        auto& a = layer.attention;
        a.wq = linear(dim, H * D, 0.02), a.wk = linear(dim, Hkv * D, 0.02), a.wv = linear(dim, Hkv * D, 0.02);
        a.wo = linear(H * D, dim, std_residual);
        a.attn_dropout = std::make_shared<Generator>(gen.engine()());
        a.resid_dropout = Dropout(c.dropout, gen);
        a.n_heads = H, a.n_kv_heads = Hkv, a.dropout = c.dropout;
        auto& f = layer.feed_forward;
        f.w1 = linear(dim, c.ffn_hidden(), 0.02), f.w2 = linear(c.ffn_hidden(), dim, 0.02);
        f.w3 = linear(dim, c.ffn_hidden(), std_residual);  // model.py scales w3, not w2
        f.dropout = Dropout(c.dropout, gen);
        layer.attention_norm = norm_layer(), layer.ffn_norm = norm_layer();
    }
    norm = norm_layer();
    output = c.tie_embeddings ? Linear<T>{} : linear(dim, c.vocab_size, 0.02);
    if (c.tie_embeddings) output.weight = tok_embeddings.weight;  // one tensor, two names
    rope = rotary_tables<T>(D, c.max_seq_len, c.rope_theta);
}

template <Real T>
Var<T, 3> LlamaAttention<T>::add_to(const Var<T, 3>& residual, const Var<T, 3>& x, const RotaryTables<T>& rope,
                                    const LanguageModelOptions& o, Var<T, 3>* weights,
                                    const KeyValueSource<T>* cache) const {
    const std::size_t B = x.shape(0), L = x.shape(1), H = n_heads, Hkv = n_kv_heads, D = wq.weight.shape(0) / H;
    const std::size_t first = cache ? cache->before : 0;
    // (B, T, heads·D) through hook `name` as (B, T, heads, D), turned by the rotary embedding when
    // `rotated` names its hook
    const auto heads = [&](const Var<T, 3>& y, std::size_t n, const char* name, const char* rotated) {
        Var<T, 4> by_head = hook_point(reshape<4>(y, {long(B), long(L), long(n), long(D)}), name);
        if (rotated) by_head = hook_point(rotary_embedding(by_head, rope, first), rotated);
        return reshape<3>(by_head, {long(B), long(L), long(n * D)});
    };
    detail::AttendResult<T> r;
    {
        const NameScope in_attn("", "attn");  // attn.hook_q ... attn.hook_z
        const Var<T, 3> q = heads(wq(x), H, "hook_q", "hook_rot_q");
        Var<T, 3> k = heads(wk(x), Hkv, "hook_k", "hook_rot_k"), v = heads(wv(x), Hkv, "hook_v", nullptr);
        if (cache) {  // this call's keys and values after the cached ones: attend to all of them
            detail::append_to_cache(cache->keys, k.value().data(), Hkv * D, B, L, first);
            detail::append_to_cache(cache->values, v.value().data(), Hkv * D, B, L, first);
            k = cache->keys, v = cache->values;
        }
        const std::size_t S = first + L;
        const auto operand = [&](const Var<T, 3>& source, std::size_t n, std::size_t group, std::size_t len) {
            detail::HeadOperand<T> op{source, detail::HeadLayout::of(source.shape(), true, n, D, 0)};
            op.layout.group = group, op.layout.len = len;  // a cache's rows past S unused
            return op;
        };
        const auto causal = [&](kernels::ScoreMasks<T>& m) {  // query t (position first + t) ignores keys past it
            m.reset(std::array<std::size_t, 4>{B, H, L, S});
            kernels::merge_causal(m, S, first);
        };
        detail::AttendOptions ao{.path = o.path, .need_weights = o.need_weights, .dropout = training ? dropout : 0.0,
                                 .generator = attn_dropout.get(), .batch_first = true, .causal = true,
                                 .operands_hooked = true};
        r = detail::attend(operand(q, H, 1, L), operand(k, Hkv, H / Hkv, S), operand(v, Hkv, H / Hkv, S),
                           T(1 / std::sqrt(double(D))), causal, ao, {B, L, H * D});
    }
    if (weights) *weights = r.weights;
    return detail::project_add(residual, wo, resid_dropout, r.context, "hook_attn_out");
}

template <Real T>
Var<T, 3> Llama<T>::hidden(const xt::xtensor<std::int64_t, 2>& tokens, const LanguageModelOptions& o,
                           std::vector<Var<T, 3>>* weights, std::size_t first,
                           const std::vector<KeyValueSource<T>>* caches) const {
    xgrad::require_var(tok_embeddings.weight, "Llama", "tok_embeddings.weight");
    const std::size_t L = tokens.shape()[1];
    if (L == 0 || first + L > config.max_seq_len)
        throw shape_error("Llama: tokens " + shape_str(tokens.shape()) + " at position " + std::to_string(first) +
                          " do not fit max_seq_len " + std::to_string(config.max_seq_len));
    const Var<T, 3> x = named(dropout(hook_point(tok_embeddings(tokens), "hook_embed")), "embedding");
    if (weights) weights->assign(layers.size(), Var<T, 3>{});
    return resume(0, x, o, weights, first, caches);
}

template <Real T>
Var<T, 3> Llama<T>::resume(std::size_t layer, Var<T, 3> x, const LanguageModelOptions& o,
                           std::vector<Var<T, 3>>* weights, std::size_t first,
                           const std::vector<KeyValueSource<T>>* caches) const {
    const std::size_t n = layers.size();
    if (layer > n || x.shape(2) != config.dim || first + x.shape(1) > config.max_seq_len)
        throw shape_error("Llama::resume: a residual " + shape_str(x.shape()) + " at layer " + std::to_string(layer) +
                          ", position " + std::to_string(first) + " does not fit " + std::to_string(n) +
                          " layers, dim " + std::to_string(config.dim) + ", max_seq_len " +
                          std::to_string(config.max_seq_len));
    if ((weights && weights->size() != n) || (caches && caches->size() != n))
        throw value_error("Llama::resume: weights and caches hold one entry per layer (" + std::to_string(n) + ")");
    {
        // node names as the state dict's (layers.0...), hook names TransformerLens's (blocks.0...)
        const NameScope in_layers("layers", "blocks");
        for (std::size_t i = layer; i < n; ++i) {
            const NameScope in_block(index_name(i));
            x = layers[i](x, rope, o, weights ? &(*weights)[i] : nullptr, caches ? &(*caches)[i] : nullptr);
        }
        x = norm(x);
    }
    const NameScope in_ln_final("", "ln_final");
    return hook_point(x, "hook_normalized");
}

template <Real T>
LanguageModelOutput<T> Llama<T>::forward(const xt::xtensor<std::int64_t, 2>& tokens, const LanguageModelOptions& o) const {
    return detail::language_model_forward(*this, tokens, o, "output");
}

template <Real T>
Var<T, 0> Llama<T>::loss(const xt::xtensor<std::int64_t, 2>& tokens, const xt::xtensor<std::int64_t, 2>& targets,
                         const LanguageModelOptions& o) const {
    return detail::language_model_loss(*this, tokens, targets, o, "Llama", "tokens", "output_loss");  // model.py's
}

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): construction, forward (training and cached),
// loss and sampling.
namespace xgrad {
#define XGRAD_DETAIL_LLAMA_COMPILED(EXTERN, T)                                                                 \
    EXTERN template struct nn::LlamaAttention<T>;                                                              \
    EXTERN template struct nn::Llama<T>;                                                                       \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::Llama<T>, T)                                                       \
    EXTERN template xt::xtensor<std::int64_t, 2> nn::generate<nn::Llama<T>>(                                   \
        const nn::Llama<T>&, const xt::xtensor<std::int64_t, 2>&, std::size_t, Generator&, const nn::GenerateOptions&);
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_LLAMA_COMPILED)
#undef XGRAD_DETAIL_LLAMA_COMPILED
}  // namespace xgrad
