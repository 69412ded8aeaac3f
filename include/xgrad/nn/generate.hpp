// Sampling from a decoder (nn::GPT as nanoGPT's generate, nn::Llama, a model of yours) with a
// key/value cache.
//
//   set_training(model, false);                 // as nanoGPT's sample.py: dropout off
//   Generator gen(1337);
//   auto out = nn::generate(model, prompt, 200, gen, {.temperature = 0.8, .top_k = 200});
//
// The cache keeps every layer's keys and values (B, positions, width) of the positions seen so
// far, so each new token runs the model on one position (its attention reads the cached keys).
// Once the sequence is longer than the model's positions the window slides, as nanoGPT and
// llama2.c's model.py crop idx to its last block_size (max_seq_len) tokens; every position then
// moves, so the slid window is recomputed in one pass per token. use_cache = false recomputes the
// window for every token as nanoGPT does: the oracle the cache is tested against.
//
// A model of yours plugs in as a CachedDecoder: decoding() gives its sizes, hidden(tokens, {},
// nullptr, first, &caches) the final hidden states (B, T, C) of tokens at positions [first,
// first + T), each layer's attention appending this call's keys and values to its cache at
// `first` and reading positions [0, first + T) from it (nn/decoder.hpp, KeyValueSource), and
// unembedding() the (vocab, C) weight the logits are taken with.
#pragma once
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/core/tape.hpp"
#include "xgrad/nn/decoder.hpp"

namespace xgrad::nn {

template <class M>
concept CachedDecoder = requires(const M& m, const xt::xtensor<std::int64_t, 2>& tokens,
                                 const std::vector<KeyValueSource<typename M::value_type>>& caches) {
    { m.decoding() } -> std::same_as<DecodingShape>;
    { m.hidden(tokens, LanguageModelOptions{}, nullptr, std::size_t(0), &caches) }
        -> std::same_as<Var<typename M::value_type, 3>>;
    { m.unembedding() } -> std::convertible_to<Var<typename M::value_type, 2>>;
};

struct GenerateOptions {
    double temperature = 1.0;           // > 0: logits are divided by it; 0: greedy (the first largest logit)
    std::optional<std::size_t> top_k{};  // keep the k largest logits (ties at the k-th kept), as nanoGPT
    // Draw only ids below it: a padded vocabulary's real size (llm.c's V of Vp); default all.
    std::optional<std::size_t> vocab_size{};
    bool use_cache = true;
    // Called after each new token with the step (0-based) and the tokens drawn for every row (B):
    // streaming output.
    std::function<void(std::size_t step, const std::vector<std::int64_t>& tokens)> on_token{};
};

namespace detail {

// Draws one token from logits (V) / temperature restricted to the top k, with `gen`.
inline std::int64_t sample_token(std::vector<double>& logits, const GenerateOptions& o, Generator& gen) {
    const std::size_t V = logits.size();
    if (o.temperature == 0)  // greedy: what nanoGPT's top_k = 1 draws whatever the temperature
        return std::int64_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    for (double& l : logits) l /= o.temperature;
    if (o.top_k && *o.top_k < V) {  // nanoGPT: logits below the k-th largest become -inf
        std::vector<double> sorted(logits);
        std::nth_element(sorted.begin(), sorted.begin() + long(*o.top_k - 1), sorted.end(), std::greater<>());
        const double kth = sorted[*o.top_k - 1];
        for (double& l : logits)
            if (l < kth) l = -INFINITY;
    }
    const double top = *std::max_element(logits.begin(), logits.end());
    double total = 0;
    for (double& l : logits) total += (l = std::exp(l - top));
    double u = gen.uniform() * total;  // the first token whose cumulative weight passes u
    for (std::size_t v = 0; v < V; ++v) {
        if (u < logits[v]) return std::int64_t(v);
        u -= logits[v];
    }
    for (std::size_t v = V; v-- > 0;)  // u at the very top (rounding): the last token with weight
        if (logits[v] > 0) return std::int64_t(v);
    return 0;
}

// The logits (B, V) of the last position of `hidden` (B, T, C), through the unembedding (V, C).
template <Real T>
std::vector<std::vector<double>> last_logits(const Var<T, 2>& unembedding, const Var<T, 3>& hidden) {
    const std::size_t B = hidden.shape(0), L = hidden.shape(1);
    const Var<T, 2> last = reshape<2>(slice(hidden, 1, long(L - 1), long(L)), std::array<long, 2>{long(B), -1});
    const Var<T, 2> logits = linear(last, unembedding);
    const std::size_t V = logits.shape(1);
    std::vector<std::vector<double>> out(B);
    for (std::size_t b = 0; b < B; ++b) out[b].assign(logits.value().data() + b * V, logits.value().data() + (b + 1) * V);
    return out;
}

}  // namespace detail

// idx (B, T0), T0 >= 1 -> (B, T0 + max_new_tokens): each row continued by max_new_tokens tokens.
template <CachedDecoder M>
xt::xtensor<std::int64_t, 2> generate(const M& model, const xt::xtensor<std::int64_t, 2>& idx,
                                      std::size_t max_new_tokens, Generator& gen, const GenerateOptions& o = {}) {
    using T = typename M::value_type;
    const DecodingShape shape = model.decoding();
    const std::size_t B = idx.shape()[0], T0 = idx.shape()[1], block = shape.positions;
    if (B == 0 || T0 == 0) throw shape_error("generate: idx " + shape_str(idx.shape()) + " needs at least one token per row");
    if (!(o.temperature >= 0))
        throw value_error("generate: temperature must be >= 0 (0: greedy), got " + std::to_string(o.temperature));
    if (o.top_k && *o.top_k == 0) throw value_error("generate: top_k must be >= 1");
    if (o.vocab_size && (*o.vocab_size == 0 || *o.vocab_size > shape.vocab_size))
        throw value_error("generate: vocab_size must be in [1, " + std::to_string(shape.vocab_size) + "]");
    const NoGrad no_grad;
    xt::xtensor<std::int64_t, 2> seq = xt::xtensor<std::int64_t, 2>::from_shape({B, T0 + max_new_tokens});
    for (std::size_t b = 0; b < B; ++b) std::copy(&idx(b, 0), &idx(b, 0) + T0, &seq(b, 0));
    // tokens [from, to) of every row
    auto window = [&](std::size_t from, std::size_t to) {
        xt::xtensor<std::int64_t, 2> w = xt::xtensor<std::int64_t, 2>::from_shape({B, to - from});
        for (std::size_t b = 0; b < B; ++b) std::copy(&seq(b, from), &seq(b, from) + (to - from), &w(b, 0));
        return w;
    };
    std::vector<KeyValueSource<T>> caches(shape.layers);
    for (auto& c : caches)
        c.keys = constant(xt::xtensor<T, 3>::from_shape({B, block, shape.cache_width})),
        c.values = constant(xt::xtensor<T, 3>::from_shape({B, block, shape.cache_width}));
    std::size_t cached = 0;  // positions in the caches; they hold tokens [len - cached, len)
    std::vector<std::int64_t> drawn(B);
    for (std::size_t step = 0; step < max_new_tokens; ++step) {
        const std::size_t len = T0 + step, from = len > block ? len - block : 0;
        Var<T, 3> hidden;
        if (!o.use_cache) {
            hidden = model.hidden(window(from, len), {}, nullptr);
        } else {
            if (from > 0) cached = 0;  // the window slid: every position moved, recompute it whole
            const std::size_t first = cached;  // the window's positions [first, len - from) are new
            for (auto& c : caches) c.before = first;
            hidden = model.hidden(window(from + first, len), {}, nullptr, first, &caches);
            cached = len - from;
        }
        auto logits = detail::last_logits<T>(model.unembedding(), hidden);
        for (std::size_t b = 0; b < B; ++b) {
            if (o.vocab_size) logits[b].resize(*o.vocab_size);
            seq(b, len) = drawn[b] = detail::sample_token(logits[b], o, gen);
        }
        if (o.on_token) o.on_token(step, drawn);
    }
    return seq;
}

}  // namespace xgrad::nn
