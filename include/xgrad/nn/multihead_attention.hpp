// nn::MultiheadAttention: torch.nn.MultiheadAttention (torch/nn/functional.py
// multi_head_attention_forward), from tape ops, so every input and parameter gets a gradient.
//
//   q, k, v   = in-projections of query (L, N, E), key (S, N, kdim), value (S, N, vdim); for
//               self-attention one GEMM gives (L, N, 3E) = q|k|v side by side
//   k, v     += bias_k / bias_v as one more key (add_bias_kv), then a zero key (add_zero_attn) -> S'
//   weights    = dropout(masked_softmax(q·kᵀ/√D, masks))   (N·H, L, S'), D = E / H
//   output     = out_proj(weights · v)
// The attention itself runs one of the paths of nn/attention/paths.hpp (its table says which and
// why): the fast ones read head h of every token in place, in the caller's layout (sequence or
// batch first), and write the context straight into (L, N, E); without need_weights and dropout,
// weights and context are one op.
//
// Differences from PyTorch, on purpose:
//  - A fully masked query row (every key ignored) gives zero attention weights, a zero attention
//    vector (the output is then out_proj.bias) and zero gradient; PyTorch gives NaN there.
//  - A bool and a float mask combine as in PyTorch 2 (bool -> -inf, then everything is added);
//    PyTorch 1.13 rejects a float key_padding_mask with a float attn_mask.
//  - is_causal with no attn_mask applies the (L, S) causal mask (key j > query i ignored); with an
//    attn_mask it is only a hint (the attn_mask is used), as PyTorch.
//  - valid_lens (d2l) is one more way to mask: keys j >= valid_len are ignored.
// Masks cover the S given keys; the bias_k and zero-attention keys are never masked (PyTorch pads
// its masks with a zero column).
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/attention/paths.hpp"
#include "xgrad/nn/attention_options.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

template <Real T>
struct MhaForwardOptions {
    // ignore_mask(m) (torch's bool mask: true = ignore), keep_mask(m) or additive_mask(b) (torch's
    // float mask, added to the scores); ops/mask.hpp
    AnyMask<T> key_padding_mask{};  // (N, S) batched or (S) unbatched
    bool need_weights = true;
    AnyMask<T> attn_mask{};         // (L, S) or (N*num_heads, L, S)
    // attn_mask is (N, L, S) (unbatched: (1, L, S)): one mask per sequence, read by every head of
    // it (3DETR's per-layer masks, which 3DETR tiles to (N*num_heads, L, S); not a torch argument).
    // The one way to give a mask per sequence.
    bool attn_mask_per_sequence = false;
    bool average_attn_weights = true;
    bool is_causal = false;  // with no attn_mask: a causal mask is applied
    // d2l's valid lengths, valid_lens(lens) as for masked_softmax (ops/mask.hpp): keys j >= lens[n]
    // ((N) batched, () unbatched) or j >= lens[n, i] ((N, L) batched, (L) unbatched) are ignored.
    // Combines with the masks.
    AnyValidLens valid_lens{};
    // automatic: the fastest path that gives what is asked (nn/attention/paths.hpp); reference
    // records every step as a plain op, for study and as the fast paths' oracle
    AttentionPath path = AttentionPath::automatic;
};

template <Real T, std::size_t N>  // N = 3 batched, N = 2 unbatched
struct MhaOutput {
    Var<T, N> output;                     // (L, N, E) / (N, L, E) if batch_first / (L, E) unbatched
    Var<T, N> attn_weights;               // averaged over heads: (N, L, S) / (L, S); empty unless need_weights && average
    Var<T, N + 1> attn_weights_per_head;  // (N, H, L, S) / (H, L, S); empty unless need_weights && !average
};

template <Real T>
struct MultiheadAttention {
    // Parameters with torch's state_dict names; absent ones are empty Vars (skipped by the walk).
    BOOST_HANA_DEFINE_STRUCT(MultiheadAttention,
        (Var<T, 2>, in_proj_weight),  // (3E, E) when kdim == vdim == E
        (Var<T, 2>, q_proj_weight),   // (E, E)    otherwise
        (Var<T, 2>, k_proj_weight),   // (E, kdim)
        (Var<T, 2>, v_proj_weight),   // (E, vdim)
        (Var<T, 1>, in_proj_bias),    // (3E) when bias
        (Var<T, 3>, bias_k),          // (1, 1, E) when add_bias_kv
        (Var<T, 3>, bias_v),
        (Linear<T>, out_proj),        // out_proj.weight (E, E), out_proj.bias (E) when bias
        // attention dropout's masks, while training && dropout > 0: seeded by one draw from the
        // construction generator (a plain copy shares it; nn::clone makes a new one)
        (std::shared_ptr<Generator>, dropout_generator));
    MultiheadAttentionOptions options;
    bool training = true;

    MultiheadAttention() = default;

    // torch's init: out_proj as Linear (kaiming), then xavier_uniform_ on in_proj_weight (or each of
    // q/k/v_proj_weight), in_proj_bias and out_proj.bias zero, xavier_normal_ on bias_k and bias_v.
    MultiheadAttention(const MultiheadAttentionOptions& o, Generator& init_gen);  // below

    std::size_t embed_dim() const { return options.embed_dim; }
    std::size_t num_heads() const { return options.num_heads; }
    std::size_t head_dim() const { return options.embed_dim / options.num_heads; }
    std::size_t kdim() const { return options.kdim.value_or(options.embed_dim); }
    std::size_t vdim() const { return options.vdim.value_or(options.embed_dim); }

    template <std::size_t N>
    MhaOutput<T, N> forward(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value,
                            const MhaForwardOptions<T>& opts = {}) const;
    // query, key and value may be expressions (x + pos): each is materialized into one node, once
    // when the same object is passed twice; anything else is one readable error (nn/module.hpp).
    template <class Q, class K, class V>
    auto forward(const Q& query, const K& key, const V& value, const MhaForwardOptions<T>& opts = {}) const {
        const auto q = xgrad::detail::module_input<T>(query);
        const auto k = xgrad::detail::module_input_reusing<T>(key, query, q);
        const auto v = xgrad::detail::module_input_reusing<T>(value, key, k, query, q);
        return forward(q, k, v, opts);
    }

private:
    template <std::size_t N>
    void check_inputs(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value) const;
};

// Out of the class: libxgrad compiles it once for float and double (XGRAD_COMPILED_IN below).
template <Real T>
MultiheadAttention<T>::MultiheadAttention(const MultiheadAttentionOptions& o, Generator& init_gen) : options(o) {
    const std::size_t E = o.embed_dim, H = o.num_heads;
    const std::size_t kd = o.kdim.value_or(E), vd = o.vdim.value_or(E);
    if (E == 0 || H == 0 || kd == 0 || vd == 0)
        throw value_error("MultiheadAttention: embed_dim, num_heads, kdim and vdim must be positive, got " +
                          std::to_string(E) + ", " + std::to_string(H) + ", " + std::to_string(kd) + " and " +
                          std::to_string(vd));
    if (E % H != 0)
        throw value_error("MultiheadAttention: embed_dim " + std::to_string(E) + " is not divisible by num_heads " +
                          std::to_string(H));
    if (!(o.dropout >= 0 && o.dropout <= 1))
        throw value_error("MultiheadAttention: dropout must be in [0, 1], got " + std::to_string(o.dropout));
    out_proj = Linear<T>(E, E, init_gen, o.bias);
    auto make = [](std::size_t rows, std::size_t cols) {
        return parameter(xt::xtensor<T, 2>(std::array<std::size_t, 2>{rows, cols}, T(0)));
    };
    if (kd == E && vd == E) {
        in_proj_weight = make(3 * E, E);
        init::xavier_uniform_(in_proj_weight, init_gen);
    } else {
        q_proj_weight = make(E, E), k_proj_weight = make(E, kd), v_proj_weight = make(E, vd);
        init::xavier_uniform_(q_proj_weight, init_gen);
        init::xavier_uniform_(k_proj_weight, init_gen);
        init::xavier_uniform_(v_proj_weight, init_gen);
    }
    if (o.bias) {
        in_proj_bias = parameter(xt::xtensor<T, 1>(std::array<std::size_t, 1>{3 * E}, T(0)));
        init::constant_(out_proj.bias, 0);
    }
    if (o.add_bias_kv) {
        bias_k = parameter(xt::xtensor<T, 3>(std::array<std::size_t, 3>{1, 1, E}, T(0)));
        bias_v = parameter(xt::xtensor<T, 3>(std::array<std::size_t, 3>{1, 1, E}, T(0)));
        init::xavier_normal_(bias_k, init_gen);
        init::xavier_normal_(bias_v, init_gen);
    }
    dropout_generator = std::make_shared<Generator>(init_gen.engine()());
}

// ---- forward ----

template <Real T>
template <std::size_t N>
void MultiheadAttention<T>::check_inputs(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value) const {
    static const std::string op = "MultiheadAttention: ";  // built once: a steady forward allocates nothing
    const std::size_t E = embed_dim();
    xgrad::require_var(query, "MultiheadAttention", "query");
    xgrad::require_var(key, "MultiheadAttention", "key");
    xgrad::require_var(value, "MultiheadAttention", "value");
    if (!out_proj.weight || (!in_proj_weight && !q_proj_weight))
        throw value_error(op + "the module has no parameters (construct it with options and a Generator)");
    if (E == 0 || num_heads() == 0 || E % num_heads() != 0)
        throw value_error(op + "embed_dim " + std::to_string(E) + " is not a positive multiple of num_heads " +
                          std::to_string(num_heads()));
    const std::size_t kd = in_proj_weight ? E : k_proj_weight.shape(1);
    const std::size_t vd = in_proj_weight ? E : v_proj_weight.shape(1);
    const auto &sq = query.shape(), &sk = key.shape(), &sv = value.shape();
    auto last_dim = [&](const auto& s, std::size_t want, const char* name, const char* dim) {
        if (s[N - 1] != want)
            throw shape_error(op + name + " has shape " + shape_str(s) + " but its last dim must be " + dim + " = " +
                              std::to_string(want));
    };
    last_dim(sq, E, "query", "embed_dim");
    last_dim(sk, kd, "key", "kdim");
    last_dim(sv, vd, "value", "vdim");
    const std::size_t batch_axis = options.batch_first ? 0 : 1, seq_axis = N == 3 ? 1 - batch_axis : 0;
    if (sk[seq_axis] != sv[seq_axis] || (N == 3 && sk[batch_axis] != sv[batch_axis]))
        throw shape_error(op + "key " + shape_str(sk) + " and value " + shape_str(sv) +
                          " need the same sequence length and batch size");
    if (N == 3 && sq[batch_axis] != sk[batch_axis])
        throw shape_error(op + "query " + shape_str(sq) + " and key " + shape_str(sk) + " need the same batch size" +
                          (options.batch_first ? " (batch_first: axis 0)" : " (axis 1)"));
}

template <Real T>
template <std::size_t N>
MhaOutput<T, N> MultiheadAttention<T>::forward(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value,
                                               const MhaForwardOptions<T>& opts) const {
    static_assert(N == 2 || N == 3,
                  "xgrad: MultiheadAttention takes batched (rank 3) or unbatched (rank 2) query, key and value");
    constexpr bool batched = N == 3;
    check_inputs(query, key, value);
    const std::size_t E = embed_dim(), H = num_heads();

    // Batched inputs keep their layout, (L, N, E) or (N, L, E); unbatched ones become (L, 1, E).
    const bool batch_first = batched && options.batch_first;
    auto as_rank3 = [](const Var<T, N>& x) -> Var<T, 3> {
        if constexpr (batched) return x;
        else return reshape<3>(x, std::array<long, 3>{long(x.shape(0)), 1, long(x.shape(1))});
    };
    const bool self_attention = query.node() == key.node() && key.node() == value.node();
    const Var<T, 3> q_in = as_rank3(query);
    const Var<T, 3> k_in = self_attention ? q_in : as_rank3(key);
    const Var<T, 3> v_in = self_attention ? q_in : as_rank3(value);
    const std::size_t seq_axis = batch_first ? 1 : 0;
    const std::size_t B = q_in.shape(1 - seq_axis), L = q_in.shape(seq_axis), S = k_in.shape(seq_axis);
    const std::size_t D = head_dim();
    // The masks, checked before anything is recorded; merged over the scores (N, H, L, S') in the node.
    const std::size_t Sp = S + (bias_k && bias_v ? 1 : 0) + (options.add_zero_attn ? 1 : 0);
    detail::MhaMasks<T> masks{opts.key_padding_mask, opts.attn_mask, opts.attn_mask_per_sequence,
                              opts.is_causal && !opts.attn_mask,
                              opts.valid_lens ? &opts.valid_lens.lens() : nullptr, {B, H, L, S, Sp, batched, {}, {}}};
    std::copy(query.shape().begin(), query.shape().end(), masks.geometry.query_shape.begin());
    std::copy(key.shape().begin(), key.shape().end(), masks.geometry.key_shape.begin());
    masks.check();
    auto heads_of = [&](const Var<T, 3>& x, std::size_t offset) {
        return detail::HeadOperand<T>{x, detail::HeadLayout::of(x.shape(), batch_first, H, D, offset)};
    };

    // In-projections. Self-attention without extra keys: one GEMM, (.., 3E) = x · in_proj_weightᵀ + b,
    // whose column blocks [0, E), [E, 2E), [2E, 3E) are q, k and v.
    detail::HeadOperand<T> q, k, v;
    if (self_attention && in_proj_weight && !bias_k && !options.add_zero_attn) {
        const Var<T, 3> qkv = in_proj_bias ? linear(q_in, in_proj_weight, in_proj_bias) : linear(q_in, in_proj_weight);
        named(qkv, "qkv");
        q = heads_of(qkv, 0), k = heads_of(qkv, E), v = heads_of(qkv, 2 * E);
    } else {
        static constexpr const char* weight_block[] = {"W_q", "W_k", "W_v"};
        static constexpr const char* bias_block[] = {"b_q", "b_k", "b_v"};
        auto rows = [&](const Var<T, 2>& w, std::size_t i) {
            return named(slice(w, 0, long(i * E), long((i + 1) * E)), weight_block[i]);
        };
        auto project = [&](const Var<T, 3>& x, const Var<T, 2>& separate, std::size_t i) -> Var<T, 3> {
            const Var<T, 2> w = in_proj_weight ? rows(in_proj_weight, i) : separate;
            if (!in_proj_bias) return linear(x, w);
            return linear(x, w, named(slice(in_proj_bias, 0, long(i * E), long((i + 1) * E)), bias_block[i]));
        };
        Var<T, 3> kp = project(k_in, k_proj_weight, 1), vp = project(v_in, v_proj_weight, 2);
        named(kp, "k"), named(vp, "v");
        // Extra keys, never masked: bias_k / bias_v (add_bias_kv), then a zero key and value (add_zero_attn).
        const std::array<std::size_t, 3> one_token = batch_first ? std::array<std::size_t, 3>{B, 1, E}
                                                                 : std::array<std::size_t, 3>{1, B, E};
        if (bias_k && bias_v) {
            kp = named(concat({kp, expand<3>(bias_k, one_token)}, long(seq_axis)), "k+bias_k");
            vp = named(concat({vp, expand<3>(bias_v, one_token)}, long(seq_axis)), "v+bias_v");
        }
        if (options.add_zero_attn) {
            const auto zeros = named(constant(xt::xtensor<T, 3>(one_token, T(0))), "zero_attn");
            kp = named(concat({kp, zeros}, long(seq_axis)), "k+zero_attn");
            vp = named(concat({vp, zeros}, long(seq_axis)), "v+zero_attn");
        }
        q = heads_of(named(project(q_in, q_proj_weight, 0), "q"), 0), k = heads_of(kp, 0), v = heads_of(vp, 0);
    }

    const auto fill_masks = [&](kernels::ScoreMasks<T>& merged) { masks.merge(merged); };

    const double p = training ? options.dropout : 0.0;
    if (p > 0 && !dropout_generator)
        throw value_error("MultiheadAttention: dropout " + std::to_string(p) +
                          " while training, but the module has no dropout_generator");
    // weights (N·H, L, S') = dropout(masked_softmax(q·kᵀ/√D)); context (.., E) = weights · v per head.
    // Node names (under the module path of the open NameScopes) are written into the reused nodes'
    // labels, whose capacity stays: a steady step's naming allocates nothing.
    // The path: nn/attention/paths.hpp.
    const T scale = T(1 / std::sqrt(double(D)));
    const std::array<std::size_t, 3> out_shape = batch_first ? std::array<std::size_t, 3>{B, L, E}
                                                             : std::array<std::size_t, 3>{L, B, E};
    const auto [context, weights] = detail::attend(q, k, v, scale, fill_masks,
        {opts.path, opts.need_weights, p, dropout_generator.get(), batch_first, masks.causal}, out_shape);
    const Var<T, 3> out = named(out_proj(context), batched ? "output" : "out_proj");  // in the caller's layout already

    MhaOutput<T, N> result;
    if constexpr (batched)
        result.output = out;
    else
        result.output = named(reshape<2>(out, std::array<long, 2>{long(L), long(E)}), "output");
    if (opts.need_weights) {
        const Var<T, 4> w = reshape<4>(weights, std::array<long, 4>{long(B), long(H), long(L), long(Sp)});
        if (opts.average_attn_weights) {
            const Var<T, 3> avg = named(mean(w, 1), batched ? "attn_weights" : "");  // (N, L, S')
            if constexpr (batched)
                result.attn_weights = avg;
            else
                result.attn_weights = named(reshape<2>(avg, std::array<long, 2>{long(L), long(Sp)}), "attn_weights");
        } else {
            if constexpr (batched)
                result.attn_weights_per_head = named(w, "attn_weights");
            else
                result.attn_weights_per_head =
                    named(reshape<3>(w, std::array<long, 3>{long(H), long(L), long(Sp)}), "attn_weights");
        }
    }
    return result;
}

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the module and its forward, batched and
// unbatched.
namespace xgrad {
#define XGRAD_DETAIL_MHA_COMPILED(EXTERN, T)                                                                \
    EXTERN template struct nn::MultiheadAttention<T>;                                                       \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::MultiheadAttention<T>, T)                                       \
    EXTERN template nn::MhaOutput<T, 3> nn::MultiheadAttention<T>::forward<3>(                              \
        const Var<T, 3>&, const Var<T, 3>&, const Var<T, 3>&, const nn::MhaForwardOptions<T>&) const;       \
    EXTERN template nn::MhaOutput<T, 2> nn::MultiheadAttention<T>::forward<2>(                              \
        const Var<T, 2>&, const Var<T, 2>&, const Var<T, 2>&, const nn::MhaForwardOptions<T>&) const;
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_MHA_COMPILED)
#undef XGRAD_DETAIL_MHA_COMPILED
}  // namespace xgrad
