// nn::AdditiveAttention: d2l's additive (Bahdanau) attention, section 11.3 — the MLP scoring that
// "Attention Is All You Need" compares scaled dot-product attention with:
//
//   features (B, Q, K, h) = tanh(W_q·q (B, Q, 1, h) + W_k·k (B, 1, K, h))   (broadcast)
//   scores   (B, Q, K)    = w_v · features
//   weights  (B, Q, K)    = dropout(masked_softmax(scores, valid_lens))
//   output   (B, Q, dv)   = weights · values (B, K, dv)
//
// queries (B, Q, query_size), keys (B, K, key_size); valid_lens(lens), lens (B) or (B, Q): keys
// j >= len are ignored. d2l fills masked scores with -1e6, so a length-0 row is uniform there;
// here it is all zero weights and zero gradient (ops/mask.hpp), never NaN. Parameters: W_q.weight (h, query_size),
// W_k.weight (h, key_size), w_v.weight (1, h), no biases (d2l's LazyLinear(bias=False)).
#pragma once
#include <cstddef>
#include <cstdint>

#include "xgrad/core/random.hpp"
#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad::nn {

template <Real T>
struct AdditiveAttentionOutput {
    Var<T, 3> output;   // (B, Q, dv)
    Var<T, 3> weights;  // (B, Q, K), before dropout (d2l's attention_weights)
};

template <Real T>
struct AdditiveAttention {
    BOOST_HANA_DEFINE_STRUCT(AdditiveAttention, (Linear<T>, W_k), (Linear<T>, W_q), (Linear<T>, w_v), (Dropout, dropout));

    AdditiveAttention() = default;
    AdditiveAttention(std::size_t key_size, std::size_t query_size, std::size_t num_hiddens, double dropout_p,
                      Generator& init_gen)
        : W_k(key_size, num_hiddens, init_gen, false),
          W_q(query_size, num_hiddens, init_gen, false),
          w_v(num_hiddens, 1, init_gen, false),
          dropout(dropout_p, init_gen) {}

    // valid: none, or valid_lens(lens) with lens (B) or (B, Q), as for masked_softmax
    template <std::size_t... V>
        requires(sizeof...(V) <= 1)
    AdditiveAttentionOutput<T> forward(const Var<T, 3>& queries, const Var<T, 3>& keys, const Var<T, 3>& values,
                                       const ValidLens<V>&... valid) const {
        static_assert(((V == 1 || V == 2) && ...), "xgrad: AdditiveAttention's valid_lens are (B) or (B, Q)");
        xgrad::require_var(queries, "AdditiveAttention", "queries");
        xgrad::require_var(keys, "AdditiveAttention", "keys");
        xgrad::require_var(values, "AdditiveAttention", "values");
        const std::size_t B = queries.shape(0), Q = queries.shape(1), K = keys.shape(1);
        if (keys.shape(0) != B || values.shape(0) != B || values.shape(1) != K)
            throw shape_error("AdditiveAttention: queries " + shape_str(queries.shape()) + ", keys " +
                              shape_str(keys.shape()) + " and values " + shape_str(values.shape()) +
                              " need one batch size, and keys and values one length");
        const long h = long(W_q.out_features());
        const Var<T, 4> q = reshape<4>(W_q(queries), {long(B), long(Q), 1, h});
        const Var<T, 4> k = reshape<4>(W_k(keys), {long(B), 1, long(K), h});
        const Var<T, 4> features = tanh(q + k);                                        // (B, Q, K, h)
        const Var<T, 3> scores = reshape<3>(w_v(features), {long(B), long(Q), long(K)});  // (B, Q, K, 1) -> (B, Q, K)
        Var<T, 3> weights;
        if constexpr (sizeof...(V) == 1) weights = masked_softmax(scores, valid...);
        else weights = softmax(scores, -1);
        return {matmul(dropout(weights), values), weights};
    }
};

}  // namespace xgrad::nn
