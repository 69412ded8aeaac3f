// What the decoder models (nn::GPT, nn::Llama) share: their forward's options and output, the
// key/value cache a block's attention reads (filled by nn/generate.hpp), and the residual sum of
// a projection.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/attention/paths.hpp"
#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/linear_cross_entropy.hpp"

namespace xgrad::nn {

// What the attention of each block does besides its output.
struct LanguageModelOptions {
    bool need_weights = false;  // keep every layer's attention weights (LanguageModelOutput::attn_weights)
    AttentionPath path = AttentionPath::automatic;
};

template <Real T>
struct LanguageModelOutput {
    Var<T, 3> logits;                     // (B, T, vocab_size)
    std::vector<Var<T, 3>> attn_weights;  // per layer (B·n_heads, T, T), with need_weights
};

// Where one block's attention reads its keys and values: the rows of its own projections, or a
// cache of earlier positions that this call's rows are appended to first.
template <Real T>
struct KeyValueSource {
    Var<T, 3> keys, values;  // (B, capacity, width) each: width C (GPT) or n_kv_heads·head_dim (Llama)
    std::size_t before = 0;  // positions already there; this call's are [before, before + T)
};

// What nn::generate needs of a model beside its forward (nn/generate.hpp, CachedDecoder), and
// the patching functions (inspect/patching.hpp) beside its hook points.
struct DecodingShape {
    std::size_t positions = 0;    // the longest sequence: block_size, max_seq_len
    std::size_t layers = 0;       // one key/value cache per layer
    std::size_t cache_width = 0;  // a cached key's or value's row: n_embd, n_kv_heads·head_dim
    std::size_t vocab_size = 0;
    std::size_t heads = 0;        // query heads per layer (attn.hook_z's heads)
    std::size_t width = 0;        // the residual stream's: n_embd, dim
};

namespace detail {
// residual + drop(proj(x)): one node (Linear::add) when the dropout keeps everything (p 0, or eval),
// so that no node holds the projection apart from the sum; drop(proj(x)) apart, through hook point
// `hook`, when a hook wants it.
template <Real T>
Var<T, 3> project_add(const Var<T, 3>& residual, const Linear<T>& proj, const Dropout& drop, const Var<T, 3>& x,
                      std::string_view hook) {
    if (hook_wanted(hook)) return residual + hook_point(drop(proj(x)), hook);
    if (drop.p == 0 || !drop.training) return proj.add(residual, x);
    return drop.add(residual, proj(x));
}

// A language model's forward (logits through its unembedding, node `name`) and loss (the mean
// cross-entropy, target -1 ignored, the unembedding and the loss in one op: linear_cross_entropy);
// `who` and `input` name the model and its input in errors.
template <class Model>
LanguageModelOutput<typename Model::value_type> language_model_forward(const Model& m,
                                                                       const xt::xtensor<std::int64_t, 2>& tokens,
                                                                       const LanguageModelOptions& o, const char* name) {
    LanguageModelOutput<typename Model::value_type> out;
    const auto x = m.hidden(tokens, o, o.need_weights ? &out.attn_weights : nullptr);
    out.logits = named(linear(x, m.unembedding()), name);
    return out;
}
template <class Model>
Var<typename Model::value_type, 0> language_model_loss(const Model& m, const xt::xtensor<std::int64_t, 2>& tokens,
                                                       const xt::xtensor<std::int64_t, 2>& targets,
                                                       const LanguageModelOptions& o, const char* who, const char* input,
                                                       const char* name) {
    if (targets.shape() != tokens.shape())
        throw shape_error(std::string(who) + "::loss: targets have shape " + shape_str(targets.shape()) + " but " + input +
                          " " + shape_str(tokens.shape()));
    LinearCrossEntropyOptions opts;
    opts.ignore_index = -1;
    return named(linear_cross_entropy(m.hidden(tokens, o, nullptr), m.unembedding(), targets, opts), name);
}

// Appends rows (B, T, width) at positions [cache.before, + T) of the cache tensor (B, capacity,
// width): a constant written in place, as the cache is.
template <Real T>
void append_to_cache(const Var<T, 3>& cache, const T* rows, std::size_t row_stride, std::size_t B, std::size_t L,
                     std::size_t before) {
    const std::size_t capacity = cache.shape(1), width = cache.shape(2);
    Var<T, 3> writable = cache;
    T* out = writable.value().data();
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < L; ++t) {
            const T* row = rows + (b * L + t) * row_stride;
            std::copy(row, row + width, out + (b * capacity + before + t) * width);
        }
}
}  // namespace detail

}  // namespace xgrad::nn
