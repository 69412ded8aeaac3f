// nn::GPT: GPT-2's architecture as nanoGPT's model.py writes it, under its state-dict names.
//
//   x      = drop(wte(idx) + wpe(0..T-1))                       (B, T, C)
//   x     += resid_dropout(c_proj(attention(c_attn(ln_1(x)))))  per block: causal, n_head heads
//   x     += dropout(c_proj(gelu(c_fc(ln_2(x)))))               per block: 4C hidden units
//   logits = ln_f(x) · wteᵀ                                     (B, T, vocab_size): lm_head tied to wte
//
// transformer.wte.weight, transformer.wpe.weight, transformer.h.{i}.ln_1.weight,
// transformer.h.{i}.attn.c_attn.weight (3C, C), transformer.h.{i}.attn.c_proj.weight,
// transformer.h.{i}.mlp.c_fc.weight (4C, C), transformer.h.{i}.mlp.c_proj.weight, transformer.ln_f.weight,
// lm_head.weight (the same tensor as transformer.wte.weight; a state dict holds both names), the
// biases too unless bias = false. The causal attention is the library's (nn/attention/paths.hpp):
// c_attn's output (B, T, 3C) is read in place as q | k | v, heads side by side, as nanoGPT's split.
// Sampling with a key/value cache: nn/generate.hpp. Checkpoint formats: io/gpt_formats.hpp.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/core/names.hpp"
#include "xgrad/nn/attention/paths.hpp"
#include "xgrad/nn/decoder.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/nn/gpt_config.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/linear_cross_entropy.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

// The language models' forward options and output (nn/decoder.hpp), under GPT's names.
using GPTForwardOptions = LanguageModelOptions;
template <Real T>
using GPTOutput = LanguageModelOutput<T>;

// nanoGPT's CausalSelfAttention: one packed in-projection, the causal attention, the out-projection.
template <Real T>
struct GPTSelfAttention {
    BOOST_HANA_DEFINE_STRUCT(GPTSelfAttention, (Linear<T>, c_attn), (Linear<T>, c_proj),
                             (std::shared_ptr<Generator>, attn_dropout), (Dropout, resid_dropout));
    std::size_t n_head = 1;
    double dropout = 0;
    bool training = true;

    // residual + resid_dropout(c_proj(attention(c_attn(x)))) in (B, T, C); the weights (B·H, T, T)
    // into *weights when asked.
    Var<T, 3> add_to(const Var<T, 3>& residual, const Var<T, 3>& x, const GPTForwardOptions& o, Var<T, 3>* weights,
                     const KeyValueSource<T>* cache = nullptr) const;
};

// nanoGPT's MLP: c_fc (4C) with the GELU in its node, c_proj, dropout.
template <Real T>
struct GPTMLP {
    BOOST_HANA_DEFINE_STRUCT(GPTMLP, (Linear<T>, c_fc), (Linear<T>, c_proj), (Dropout, dropout));
    GeluForm gelu = GeluForm::erf;

    // residual + dropout(c_proj(gelu(c_fc(x)))); hook points mlp.hook_post (after the GELU) and
    // hook_mlp_out (what is added to the residual)
    Var<T, 3> add_to(const Var<T, 3>& residual, const Var<T, 3>& x) const {
        const auto act = gelu == GeluForm::tanh ? LinearActivation::gelu_tanh : LinearActivation::gelu;
        Var<T, 3> post;
        {
            const NameScope in_mlp("", "mlp");
            post = hook_point(c_fc(x, act), "hook_post");
        }
        return detail::project_add(residual, c_proj, dropout, post, "hook_mlp_out");
    }
};

template <Real T>
struct GPTBlock {
    BOOST_HANA_DEFINE_STRUCT(GPTBlock, (LayerNorm<T>, ln_1), (GPTSelfAttention<T>, attn), (LayerNorm<T>, ln_2),
                             (GPTMLP<T>, mlp));

    // Hook points hook_resid_pre, hook_resid_mid (after the attention's sum), hook_resid_post, and
    // those of the attention (attn.*, hook_attn_out) and the MLP (mlp.hook_post, hook_mlp_out).
    Var<T, 3> operator()(const Var<T, 3>& x, const GPTForwardOptions& o = {}, Var<T, 3>* weights = nullptr,
                         const KeyValueSource<T>* cache = nullptr) const {
        const Var<T, 3> in = hook_point(x, "hook_resid_pre");
        const Var<T, 3> h = hook_point(attn.add_to(in, ln_1(in), o, weights, cache), "hook_resid_mid");
        return hook_point(mlp.add_to(h, ln_2(h)), "hook_resid_post");
    }
};

// nanoGPT's self.transformer ModuleDict.
template <Real T>
struct GPTTransformer {
    BOOST_HANA_DEFINE_STRUCT(GPTTransformer, (Embedding<T>, wte), (Embedding<T>, wpe), (Dropout, drop),
                             (std::vector<GPTBlock<T>>, h), (LayerNorm<T>, ln_f));
};

template <Real T>
struct GPT {
    BOOST_HANA_DEFINE_STRUCT(GPT, (GPTTransformer<T>, transformer), (Linear<T>, lm_head));
    GPTConfig config;
    using value_type = T;

    GPT() = default;
    // nanoGPT's init: Linear and Embedding weights ~ N(0, 0.02), the residual projections'
    // c_proj.weight ~ N(0, 0.02/√(2·n_layer)), biases 0, LayerNorms 1 and 0; lm_head tied to wte.
    GPT(const GPTConfig& c, Generator& gen);

    // logits (B, T, vocab_size) of idx (B, T), T <= block_size, every id in [0, vocab_size).
    Var<T, 3> operator()(const xt::xtensor<std::int64_t, 2>& idx) const { return forward(idx).logits; }
    GPTOutput<T> forward(const xt::xtensor<std::int64_t, 2>& idx, const GPTForwardOptions& o = {}) const;
    // gpt_loss(forward(idx).logits, targets) without the logits (B, T, vocab_size) and their
    // gradient kept apart: lm_head and the loss in one op (linear_cross_entropy).
    // The training step's form: the same value and gradients up to float rounding.
    Var<T, 0> loss(const xt::xtensor<std::int64_t, 2>& idx, const xt::xtensor<std::int64_t, 2>& targets,
                   const GPTForwardOptions& o = {}) const;
    // The final hidden states (B, T, C) after ln_f, for positions [first, first + T) of idx's rows;
    // `caches` (one per layer) give the earlier positions' keys and values (nn/generate.hpp).
    Var<T, 3> hidden(const xt::xtensor<std::int64_t, 2>& idx, const GPTForwardOptions& o, std::vector<Var<T, 3>>* weights,
                     std::size_t first = 0, const std::vector<KeyValueSource<T>>* caches = nullptr) const;
    // What hidden() runs after the embeddings, from block `layer` on: the residual stream x (B, T, C)
    // at blocks.{layer}.hook_resid_pre through blocks layer .. n_layer − 1 and ln_f. `weights` and
    // `caches` are indexed by layer. Activation patching resumes the corrupted run here.
    Var<T, 3> resume(std::size_t layer, Var<T, 3> x, const GPTForwardOptions& o = {}, std::vector<Var<T, 3>>* weights = nullptr,
                     std::size_t first = 0, const std::vector<KeyValueSource<T>>* caches = nullptr) const;

    // For nn::generate (CachedDecoder) and patching: the sizes, the tied lm_head, ln_f.
    DecodingShape decoding() const {
        return {config.block_size, transformer.h.size(), config.n_embd, config.vocab_size, config.n_head, config.n_embd};
    }
    const Var<T, 2>& unembedding() const { return lm_head.weight; }
    const LayerNorm<T>& final_norm() const { return transformer.ln_f; }

    // nanoGPT's get_num_params(non_embedding = true): every parameter once, minus wpe.
    std::size_t num_params(bool non_embedding = true) const;
};

// nanoGPT's loss: mean cross-entropy of logits (B, T, V) against targets (B, T); target -1 is ignored.
template <Real T>
Var<T, 0> gpt_loss(const Var<T, 3>& logits, const xt::xtensor<std::int64_t, 2>& targets) {
    const std::size_t B = logits.shape(0), L = logits.shape(1);
    if (targets.shape()[0] != B || targets.shape()[1] != L)
        throw shape_error("gpt_loss: targets have shape " + shape_str(targets.shape()) + " but logits " +
                          shape_str(logits.shape()) + " need (" + std::to_string(B) + ", " + std::to_string(L) + ")");
    // cross_entropy of logits.view(-1, V): the class axis last, each (b, t) a row; no copy of the logits
    return cross_entropy(logits, targets, {.ignore_index = -1, .class_axis = -1});
}

// ---- out of the class: libxgrad compiles them once for float and double (XGRAD_COMPILED_IN below) ----

template <Real T>
GPT<T>::GPT(const GPTConfig& c, Generator& gen) : config(c) {
    c.validate();
    const std::size_t C = c.n_embd;
    const double std_residual = 0.02 / std::sqrt(2.0 * double(c.n_layer));
    auto linear = [&](std::size_t in, std::size_t out, double std) {
        Linear<T> l(in, out, gen, c.bias);
        init::normal_(l.weight, 0, std, gen);
        if (l.bias) init::constant_(l.bias, 0);
        return l;
    };
    auto norm = [&] { return LayerNorm<T>(C, 1e-5, true, c.bias); };
    transformer.wte = Embedding<T>(c.vocab_size, C, gen);
    transformer.wpe = Embedding<T>(c.block_size, C, gen);
    init::normal_(transformer.wte.weight, 0, 0.02, gen);
    init::normal_(transformer.wpe.weight, 0, 0.02, gen);
    transformer.drop = Dropout(c.dropout, gen);
    transformer.h.resize(c.n_layer);
    for (auto& block : transformer.h) {
        block.ln_1 = norm(), block.ln_2 = norm();
        block.attn.c_attn = linear(C, 3 * C, 0.02);
        block.attn.c_proj = linear(C, C, std_residual);
        block.attn.attn_dropout = std::make_shared<Generator>(gen.engine()());
        block.attn.resid_dropout = Dropout(c.dropout, gen);
        block.attn.n_head = c.n_head, block.attn.dropout = c.dropout;
        block.mlp.c_fc = linear(C, 4 * C, 0.02);
        block.mlp.c_proj = linear(4 * C, C, std_residual);
        block.mlp.dropout = Dropout(c.dropout, gen);
        block.mlp.gelu = c.gelu;
    }
    transformer.ln_f = norm();
    lm_head.weight = transformer.wte.weight;  // tied: one tensor, two names
}

template <Real T>
Var<T, 3> GPTSelfAttention<T>::add_to(const Var<T, 3>& residual, const Var<T, 3>& x, const GPTForwardOptions& o,
                                      Var<T, 3>* weights, const KeyValueSource<T>* cache) const {
    const std::size_t B = x.shape(0), L = x.shape(1), C = x.shape(2), H = n_head, D = C / H;
    const Var<T, 3> qkv = named(c_attn(x), "qkv");  // (B, T, 3C) = q | k | v
    const std::array<std::size_t, 3> qkv_shape{B, L, 3 * C}, out_shape{B, L, C};
    auto heads = [&](const Var<T, 3>& source, const std::array<std::size_t, 3>& shape, std::size_t offset) {
        return detail::HeadOperand<T>{source, detail::HeadLayout::of(shape, true, H, D, offset)};
    };
    const auto q = heads(qkv, qkv_shape, 0);
    detail::HeadOperand<T> k = heads(qkv, qkv_shape, C), v = heads(qkv, qkv_shape, 2 * C);
    std::size_t before = 0;
    if (cache) {  // this call's keys and values after the cached ones: attend to all of them
        before = cache->before;
        const std::size_t capacity = cache->keys.shape(1);
        detail::append_to_cache(cache->keys, qkv.value().data() + C, 3 * C, B, L, before);
        detail::append_to_cache(cache->values, qkv.value().data() + 2 * C, 3 * C, B, L, before);
        k = heads(cache->keys, {B, capacity, C}, 0), v = heads(cache->values, {B, capacity, C}, 0);
        k.layout.len = v.layout.len = before + L;
    }
    const std::size_t S = k.layout.len;
    // causal: query t (position before + t) ignores keys j > before + t
    const auto causal = [&](kernels::ScoreMasks<T>& m) {
        m.reset(std::array<std::size_t, 4>{B, H, L, S});
        kernels::merge_causal(m, S, before);
    };
    const double p = training ? dropout : 0.0;
    detail::AttendResult<T> r;
    {
        const NameScope in_attn("", "attn");  // attn.hook_q ... attn.hook_z (nn/attention/hooked.hpp)
        r = detail::attend(q, k, v, T(1 / std::sqrt(double(D))), causal,
                           {o.path, o.need_weights, p, attn_dropout.get(), true, true}, out_shape);
    }
    if (weights) *weights = r.weights;
    return detail::project_add(residual, c_proj, resid_dropout, r.context, "hook_attn_out");
}

template <Real T>
Var<T, 3> GPT<T>::hidden(const xt::xtensor<std::int64_t, 2>& idx, const GPTForwardOptions& o,
                         std::vector<Var<T, 3>>* weights, std::size_t first,
                         const std::vector<KeyValueSource<T>>* caches) const {
    xgrad::require_var(transformer.wte.weight, "GPT", "transformer.wte.weight");
    const std::size_t L = idx.shape()[1];
    if (L == 0 || first + L > config.block_size)
        throw shape_error("GPT: idx " + shape_str(idx.shape()) + " at position " + std::to_string(first) +
                          " does not fit block_size " + std::to_string(config.block_size));
    // positions [first, first + T) are rows of wpe: a slice, so no index tensor is built per step
    const Var<T, 2> pos = hook_point(slice(transformer.wpe.weight, 0, long(first), long(first + L)), "hook_pos_embed");
    const Var<T, 3> tokens = hook_point(transformer.wte(idx), "hook_embed");
    const Var<T, 3> x = named(transformer.drop(tokens + pos), "embedding");  // the blocks' input
    if (weights) weights->assign(transformer.h.size(), Var<T, 3>{});
    return resume(0, x, o, weights, first, caches);
}

template <Real T>
Var<T, 3> GPT<T>::resume(std::size_t layer, Var<T, 3> x, const GPTForwardOptions& o, std::vector<Var<T, 3>>* weights,
                         std::size_t first, const std::vector<KeyValueSource<T>>* caches) const {
    const std::size_t n = transformer.h.size();
    if (layer > n || x.shape(2) != config.n_embd || first + x.shape(1) > config.block_size)
        throw shape_error("GPT::resume: a residual " + shape_str(x.shape()) + " at layer " + std::to_string(layer) +
                          ", position " + std::to_string(first) + " does not fit " + std::to_string(n) +
                          " layers, n_embd " + std::to_string(config.n_embd) + ", block_size " +
                          std::to_string(config.block_size));
    if ((weights && weights->size() != n) || (caches && caches->size() != n))
        throw value_error("GPT::resume: weights and caches hold one entry per layer (" + std::to_string(n) + ")");
    {
        // node names as the state dict's (transformer.h.0...), hook names TransformerLens's (blocks.0...)
        const NameScope in_transformer("transformer", ""), in_blocks("h", "blocks");
        for (std::size_t i = layer; i < n; ++i) {
            const NameScope in_block(index_name(i));
            x = transformer.h[i](x, o, weights ? &(*weights)[i] : nullptr, caches ? &(*caches)[i] : nullptr);
        }
        x = transformer.ln_f(x);
    }
    const NameScope in_ln_final("", "ln_final");
    return hook_point(x, "hook_normalized");
}

template <Real T>
GPTOutput<T> GPT<T>::forward(const xt::xtensor<std::int64_t, 2>& idx, const GPTForwardOptions& o) const {
    return detail::language_model_forward(*this, idx, o, "lm_head");
}

template <Real T>
Var<T, 0> GPT<T>::loss(const xt::xtensor<std::int64_t, 2>& idx, const xt::xtensor<std::int64_t, 2>& targets,
                       const GPTForwardOptions& o) const {
    return detail::language_model_loss(*this, idx, targets, o, "GPT", "idx", "lm_head_loss");  // gpt_loss's value
}

template <Real T>
std::size_t GPT<T>::num_params(bool non_embedding) const {
    std::size_t n = parameter_count(*this);
    if (non_embedding) n -= transformer.wpe.weight.value().size();
    return n;
}

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): construction, forward (training and cached),
// loss and sampling.
namespace xgrad {
#define XGRAD_DETAIL_GPT_COMPILED(EXTERN, T)                                                                        \
    EXTERN template struct nn::GPTSelfAttention<T>;                                                                 \
    EXTERN template struct nn::GPT<T>;                                                                              \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::GPT<T>, T)                                                              \
    EXTERN template Var<T, 0> nn::gpt_loss<T>(const Var<T, 3>&, const xt::xtensor<std::int64_t, 2>&);               \
    EXTERN template xt::xtensor<std::int64_t, 2> nn::generate<nn::GPT<T>>(                                           \
        const nn::GPT<T>&, const xt::xtensor<std::int64_t, 2>&, std::size_t, Generator&, const nn::GenerateOptions&);
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_GPT_COMPILED)
#undef XGRAD_DETAIL_GPT_COMPILED
}  // namespace xgrad
