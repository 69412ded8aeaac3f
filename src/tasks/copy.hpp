// The copy task and its model: a random token sequence, a separator, then the same sequence.
//   tokens  a1 a2 .. an SEP a1 .. a(n-1)        (length 2n, the model input)
//   targets                 a1 a2 .. an         (predicted at positions n .. 2n-1)
// Under a causal mask, position n+k must fetch a(k+1) from position k: every answer travels
// through attention (a fixed offset of -n), not through the embedding of its own position.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include <xtensor/xview.hpp>

#include "tasks/task_config.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::copy_task {

struct Batch {
    xt::xtensor<std::int64_t, 2> tokens;   // (B, 2n)
    xt::xtensor<std::int64_t, 1> targets;  // (B·n): the second half, flattened

    // Sequences [begin, end) (a data-parallel rank's share).
    Batch rows(std::size_t begin, std::size_t end) const {
        const std::size_t n = tokens.shape(1) / 2;
        return {xt::view(tokens, xt::range(begin, end), xt::all()), xt::view(targets, xt::range(begin * n, end * n))};
    }
};

// Tokens are drawn from [0, vocab); the separator is token `vocab`.
inline Batch make_batch(std::size_t batch, std::size_t n, std::size_t vocab, Generator& gen) {
    Batch b{xt::xtensor<std::int64_t, 2>::from_shape({batch, 2 * n}), xt::xtensor<std::int64_t, 1>::from_shape({batch * n})};
    for (std::size_t i = 0; i < batch; ++i) {
        for (std::size_t k = 0; k < n; ++k) {
            const auto t = static_cast<std::int64_t>(gen.uniform() * double(vocab));
            b.tokens(i, k) = t;
            if (k + 1 < n) b.tokens(i, n + 1 + k) = t;
            b.targets(i * n + k) = t;
        }
        b.tokens(i, n) = std::int64_t(vocab);
    }
    return b;
}

struct ModelOptions {
    std::size_t vocab = 10, seq = 8, embed = 32, heads = 4;
    bool causal = true;

    // As integers by name: what a checkpoint records (io::CheckpointConfig) to rebuild the model.
    std::map<std::string, std::int64_t> config() const {
        return {{"vocab", std::int64_t(vocab)}, {"seq", std::int64_t(seq)}, {"embed", std::int64_t(embed)},
                {"heads", std::int64_t(heads)}, {"causal", causal ? 1 : 0}};
    }
    // The options config() gave; value_error naming `source` and the first missing or invalid key.
    static ModelOptions from_config(const std::map<std::string, std::int64_t>& c, const std::string& source) {
        const auto get = [&](const char* key, std::int64_t lo) { return tasks::config_value(c, key, lo, source, "copy"); };
        return {std::size_t(get("vocab", 1)), std::size_t(get("seq", 1)), std::size_t(get("embed", 1)),
                std::size_t(get("heads", 1)), get("causal", 0) != 0};
    }
};

// embedding + sinusoidal positions -> causal self-attention with a residual and
// LayerNorm -> linear head over the vocabulary.
template <Real T>
struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (nn::Embedding<T>, embed), (nn::PositionalEncoding<T>, pos),
                             (nn::MultiheadAttention<T>, attn), (nn::LayerNorm<T>, norm), (nn::Linear<T>, head));
    ModelOptions options;

    Model(const ModelOptions& o, Generator& gen)
        : embed(o.vocab + 1, o.embed, gen),
          pos({.d_model = o.embed, .dropout = 0.0, .batch_first = true, .max_len = 2 * o.seq + 1}, 0),
          attn(nn::MultiheadAttentionOptions{.embed_dim = o.embed, .num_heads = o.heads, .batch_first = true}, gen),
          norm(o.embed),
          head(o.embed, o.vocab, gen),
          options(o) {}

    // tokens (B, 2n) -> logits (B·n, vocab) for the second half; with `head_weights`, also every
    // head's attention weights (B, H, 2n, 2n) (rows: queries, columns: keys).
    Var<T, 2> operator()(const xt::xtensor<std::int64_t, 2>& tokens, Var<T, 4>* head_weights = nullptr) const {
        const std::size_t batch = tokens.shape(0), n = tokens.shape(1) / 2;
        // N(0,1) embeddings: no √E scaling, the positions stay visible
        Var<T, 3> x = named(pos(embed(tokens)), "embedding");
        nn::MhaForwardOptions<T> fo;
        fo.need_weights = head_weights != nullptr;
        fo.average_attn_weights = false;
        fo.is_causal = options.causal;
        auto attended = attn.forward(x, x, x, fo);
        if (head_weights) *head_weights = attended.attn_weights_per_head;
        Var<T, 3> h = norm(eval(x + attended.output));
        Var<T, 3> second_half = slice(h, 1, long(n), long(2 * n));
        return head(reshape<2>(second_half, {long(batch * n), long(options.embed)}));
    }
};

// Fraction of correctly predicted tokens of the copied half of `held_out`.
template <Real T>
double accuracy(const Model<T>& model, const Batch& held_out) {
    NoGrad no_record;
    const auto logits = model(held_out.tokens);
    const std::size_t rows = logits.shape(0), classes = logits.shape(1);
    std::size_t right = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        const T* row = logits.value().data() + r * classes;
        right += std::max_element(row, row + classes) - row == held_out.targets(r);
    }
    return double(right) / double(rows);
}

}  // namespace xgrad::copy_task
