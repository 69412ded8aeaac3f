// The sort task and its encoder-decoder: n random digits in, the same digits sorted out.
//   src      d1 d2 .. dn                (encoder input)
//   tgt_in   BOS s1 .. s(n-1)           (decoder input under a causal mask: teacher forcing)
//   targets  s1 s2 .. sn                (s = sorted d; predicted at decoder positions 0 .. n-1)
// Evaluation decodes greedily: BOS, then one argmax token at a time fed back, n times.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "tasks/task_config.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::sort_task {

struct Batch {
    xt::xtensor<std::int64_t, 2> src;      // (B, n) digits in [0, vocab)
    xt::xtensor<std::int64_t, 2> tgt_in;   // (B, n) BOS (= vocab), then the sorted digits but the last
    xt::xtensor<std::int64_t, 1> targets;  // (B·n) the sorted digits, flattened

    // Sequences [begin, end) (a data-parallel rank's share).
    Batch rows(std::size_t begin, std::size_t end) const {
        const std::size_t n = src.shape(1);
        return {xt::view(src, xt::range(begin, end), xt::all()), xt::view(tgt_in, xt::range(begin, end), xt::all()),
                xt::view(targets, xt::range(begin * n, end * n))};
    }
};

// Digits drawn uniformly from [0, vocab); BOS is token `vocab`.
inline Batch make_batch(std::size_t batch, std::size_t n, std::size_t vocab, Generator& gen) {
    Batch b{xt::xtensor<std::int64_t, 2>::from_shape({batch, n}), xt::xtensor<std::int64_t, 2>::from_shape({batch, n}),
            xt::xtensor<std::int64_t, 1>::from_shape({batch * n})};
    std::vector<std::int64_t> sorted(n);
    for (std::size_t i = 0; i < batch; ++i) {
        for (std::size_t k = 0; k < n; ++k)
            sorted[k] = b.src(i, k) = static_cast<std::int64_t>(gen.uniform() * double(vocab));
        std::sort(sorted.begin(), sorted.end());
        b.tgt_in(i, 0) = std::int64_t(vocab);
        for (std::size_t k = 0; k < n; ++k) {
            b.targets(i * n + k) = sorted[k];
            if (k + 1 < n) b.tgt_in(i, k + 1) = sorted[k];
        }
    }
    return b;
}

struct ModelOptions {
    std::size_t vocab = 10, seq = 8, d_model = 64, heads = 2, ffn = 128, layers = 1;

    // As integers by name: what a checkpoint records (io::CheckpointConfig) to rebuild the model.
    std::map<std::string, std::int64_t> config() const {
        return {{"vocab", std::int64_t(vocab)}, {"seq", std::int64_t(seq)},     {"d_model", std::int64_t(d_model)},
                {"heads", std::int64_t(heads)}, {"ffn", std::int64_t(ffn)}, {"layers", std::int64_t(layers)}};
    }
    // The options config() gave; value_error naming `source` and the first missing or invalid key.
    static ModelOptions from_config(const std::map<std::string, std::int64_t>& c, const std::string& source) {
        const auto get = [&](const char* key) { return std::size_t(tasks::config_value(c, key, 1, source, "sort")); };
        return {get("vocab"), get("seq"), get("d_model"), get("heads"), get("ffn"), get("layers")};
    }
};

// A decoder run's output: the logits (B, L, vocab) at every decoder position and, when asked, every
// decoder layer's per-head cross-attention (B, H, L, n).
template <Real T>
struct Decoded {
    Var<T, 3> logits;
    std::vector<Var<T, 4>> cross_attention;
};

// Shared token embedding (digits and BOS) + sinusoidal positions -> nn::Transformer (post-norm,
// relu, no dropout, batch-first) -> linear head over the digits.
template <Real T>
struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (nn::Embedding<T>, embed), (nn::PositionalEncoding<T>, pos),
                             (nn::Transformer<T>, transformer), (nn::Linear<T>, head));
    ModelOptions options;

    Model(const ModelOptions& o, Generator& gen)
        : embed(o.vocab + 1, o.d_model, gen),
          pos({.d_model = o.d_model, .dropout = 0.0, .batch_first = true, .max_len = o.seq}, 0),
          transformer(nn::TransformerOptions{.layer = {.d_model = o.d_model, .nhead = o.heads, .dim_feedforward = o.ffn,
                                                       .dropout = 0.0, .batch_first = true},
                                             .num_encoder_layers = o.layers, .num_decoder_layers = o.layers},
                      gen),
          head(o.d_model, o.vocab, gen),
          options(o) {}

    // src (B, n) -> memory (B, n, d_model)
    Var<T, 3> encode(const xt::xtensor<std::int64_t, 2>& src) const {
        return transformer.encoder.forward(named(pos(embed(src)), "source"));  // named: explore's saliency
    }

    // tgt (B, L) tokens, memory (B, n, d) -> logits (B, L, vocab), under the causal mask.
    Decoded<T> decode(const xt::xtensor<std::int64_t, 2>& tgt, const Var<T, 3>& memory, bool need_weights = false) const {
        nn::DecoderForwardOptions<T, 3> o;
        o.tgt_mask = nn::generate_square_subsequent_mask<T>(tgt.shape(1));
        o.need_weights = need_weights, o.average_attn_weights = false;
        auto r = transformer.decoder.forward_with_weights(named(pos(embed(tgt)), "target"), memory, o);
        return {head(r.output), std::move(r.attn_weights_per_head)};
    }

    // Teacher forcing: the logits (B·n, vocab) of every target position.
    Var<T, 2> operator()(const Batch& b) const {
        const auto logits = decode(b.tgt_in, encode(b.src)).logits;
        return reshape<2>(logits, {long(b.targets.size()), long(options.vocab)});
    }
};

// Greedy decoding of src (B, n): BOS, then n times the argmax of the last position appended.
// Returns the tokens after BOS (B, n).
template <Real T>
xt::xtensor<std::int64_t, 2> greedy_decode(const Model<T>& model, const xt::xtensor<std::int64_t, 2>& src) {
    NoGrad no_record;
    const std::size_t batch = src.shape(0), n = src.shape(1), vocab = model.options.vocab;
    const Var<T, 3> memory = model.encode(src);
    xt::xtensor<std::int64_t, 2> tokens = xt::xtensor<std::int64_t, 2>::from_shape({batch, n + 1});
    for (std::size_t i = 0; i < batch; ++i) tokens(i, 0) = std::int64_t(vocab);
    for (std::size_t k = 0; k < n; ++k) {
        const xt::xtensor<std::int64_t, 2> prefix = xt::view(tokens, xt::all(), xt::range(0, k + 1));
        const auto logits = model.decode(prefix, memory).logits;  // (B, k+1, vocab)
        for (std::size_t i = 0; i < batch; ++i) {
            const T* row = logits.value().data() + (i * (k + 1) + k) * vocab;
            tokens(i, k + 1) = std::max_element(row, row + vocab) - row;
        }
    }
    return xt::view(tokens, xt::all(), xt::range(1, n + 1));
}

struct Score {
    double exact_match = 0;     // sequences whose every token is right
    double token_accuracy = 0;  // tokens right, at their position
};

// Greedily decoded `held_out.src` against its sorted targets.
template <Real T>
Score score(const Model<T>& model, const Batch& held_out) {
    const auto decoded = greedy_decode(model, held_out.src);
    const std::size_t batch = decoded.shape(0), n = decoded.shape(1);
    std::size_t exact = 0, right = 0;
    for (std::size_t i = 0; i < batch; ++i) {
        std::size_t row_right = 0;
        for (std::size_t k = 0; k < n; ++k) row_right += decoded(i, k) == held_out.targets(i * n + k);
        right += row_right, exact += row_right == n;
    }
    return {double(exact) / double(batch), double(right) / double(batch * n)};
}

}  // namespace xgrad::sort_task
