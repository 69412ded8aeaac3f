// nn::MultiheadAttention: torch.nn.MultiheadAttention (torch/nn/functional.py
// multi_head_attention_forward), composed from tape ops so every input and parameter gets a gradient.
//
//   q, k, v   = in-projections of query (L, N, E), key (S, N, kdim), value (S, N, vdim)
//   k, v     += bias_k / bias_v as one more key (add_bias_kv)        -> S + 1
//   heads      (N·H, L, D), (N·H, S', D), D = E / H; add_zero_attn appends a zero key and value
//   weights    = dropout(masked_softmax(q·kᵀ/√D, masks)), output = out_proj(merge_heads(weights · v))
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
#include <optional>
#include <string>

#include "xgrad/core/random.hpp"
#include "xgrad/nn/attention_mask.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/nn/sdpa.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn {

struct MultiheadAttentionOptions {
    std::size_t embed_dim = 0, num_heads = 1;
    double dropout = 0;
    bool bias = true, add_bias_kv = false, add_zero_attn = false;
    std::optional<std::size_t> kdim{}, vdim{};  // nullopt = embed_dim
    bool batch_first = false;
};

template <Real T>
struct MhaForwardOptions {
    AttentionMask<T> key_padding_mask{};  // (N, S) batched or (S) unbatched
    bool need_weights = true;
    AttentionMask<T> attn_mask{};         // (L, S) or (N*num_heads, L, S)
    bool average_attn_weights = true;
    bool is_causal = false;  // with no attn_mask: a causal mask is applied
    // d2l's valid lengths (int64): keys j >= valid_lens[n] ((N) batched, () unbatched) or
    // j >= valid_lens[n, i] ((N, L) batched, (L) unbatched) are ignored. Combines with the masks.
    std::optional<xt::xarray<std::int64_t>> valid_lens{};
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
        (Linear<T>, out_proj));       // out_proj.weight (E, E), out_proj.bias (E) when bias
    MultiheadAttentionOptions options;
    bool training = true;
    Generator* dropout_generator = nullptr;  // used when training && dropout > 0

    MultiheadAttention() = default;

    // torch's init: out_proj as Linear (kaiming), then xavier_uniform_ on in_proj_weight (or each of
    // q/k/v_proj_weight), in_proj_bias and out_proj.bias zero, xavier_normal_ on bias_k and bias_v.
    MultiheadAttention(const MultiheadAttentionOptions& o, Generator& init_gen) : options(o) {
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
    }

    std::size_t embed_dim() const { return options.embed_dim; }
    std::size_t num_heads() const { return options.num_heads; }
    std::size_t head_dim() const { return options.embed_dim / options.num_heads; }
    std::size_t kdim() const { return options.kdim.value_or(options.embed_dim); }
    std::size_t vdim() const { return options.vdim.value_or(options.embed_dim); }

    template <std::size_t N>
    MhaOutput<T, N> forward(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value,
                            const MhaForwardOptions<T>& opts = {}) const;

private:
    template <std::size_t N>
    void check_inputs(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value) const;
};

// ---- forward ----

template <Real T>
template <std::size_t N>
void MultiheadAttention<T>::check_inputs(const Var<T, N>& query, const Var<T, N>& key, const Var<T, N>& value) const {
    const std::string op = "MultiheadAttention: ";
    const std::size_t E = embed_dim();
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

    // Everything below is batch first: (N, L, E).
    Var<T, 3> q, k, v;
    if constexpr (batched) {
        q = options.batch_first ? query : transpose(query, 0, 1);
        k = options.batch_first ? key : transpose(key, 0, 1);
        v = options.batch_first ? value : transpose(value, 0, 1);
    } else {
        q = reshape<3>(query, std::array<long, 3>{1, long(query.shape(0)), long(query.shape(1))});
        k = reshape<3>(key, std::array<long, 3>{1, long(key.shape(0)), long(key.shape(1))});
        v = reshape<3>(value, std::array<long, 3>{1, long(value.shape(0)), long(value.shape(1))});
    }
    const std::size_t B = q.shape(0), L = q.shape(1), S = k.shape(1);

    // In-projections: q (N, L, E) = query · W_qᵀ + b_q, etc. (W_q = rows [0, E) of in_proj_weight)
    auto rows = [&](const Var<T, 2>& w, std::size_t i) { return slice(w, 0, long(i * E), long((i + 1) * E)); };
    const Var<T, 2> wq = in_proj_weight ? rows(in_proj_weight, 0) : q_proj_weight;
    const Var<T, 2> wk = in_proj_weight ? rows(in_proj_weight, 1) : k_proj_weight;
    const Var<T, 2> wv = in_proj_weight ? rows(in_proj_weight, 2) : v_proj_weight;
    auto project = [&](const Var<T, 3>& x, const Var<T, 2>& w, std::size_t i) -> Var<T, 3> {
        if (!in_proj_bias) return linear(x, w);
        return linear(x, w, slice(in_proj_bias, 0, long(i * E), long((i + 1) * E)));
    };
    q = project(q, wq, 0), k = project(k, wk, 1), v = project(v, wv, 2);

    // add_bias_kv: one more key and value, shared by the batch: k (N, S+1, E)
    if (bias_k && bias_v) {
        k = concat({k, expand<3>(bias_k, std::array<std::size_t, 3>{B, 1, E})}, 1);
        v = concat({v, expand<3>(bias_v, std::array<std::size_t, 3>{B, 1, E})}, 1);
    }
    q = split_heads(q, H), k = split_heads(k, H), v = split_heads(v, H);  // (N·H, len, D)
    if (options.add_zero_attn) {  // a zero key and value after the head split: (N·H, S'+1, D)
        const auto zeros = constant(xt::xtensor<T, 3>(std::array<std::size_t, 3>{B * H, 1, head_dim()}, T(0)));
        k = concat({k, zeros}, 1), v = concat({v, zeros}, 1);
    }
    const std::size_t Sp = k.shape(1);

    // Masks -> one ignore mask and/or one additive mask over the scores (N·H, L, S').
    const detail::MaskGeometry geom{B, H, L, S, Sp, batched,
                                    "query " + shape_str(query.shape()) + " and key " + shape_str(key.shape())};
    detail::ScoreMasks<T> masks;
    detail::merge_mask(masks, opts.key_padding_mask, 'k', "key_padding_mask", geom);
    detail::merge_mask(masks, opts.attn_mask, 'a', "attn_mask", geom);
    if (opts.is_causal && !opts.attn_mask)
        detail::merge_ignore_rule(masks, geom, [](std::size_t, std::size_t i, std::size_t j) { return j > i; });
    if (opts.valid_lens) {
        const auto& lens = *opts.valid_lens;
        detail::check_valid_lens(lens, geom);
        const bool per_query = lens.dimension() == (batched ? 2 : 1);
        detail::merge_ignore_rule(masks, geom, [&](std::size_t n, std::size_t i, std::size_t j) {
            return std::int64_t(j) >= lens.data()[per_query ? n * L + i : n];
        });
    }

    const double p = training ? options.dropout : 0.0;
    if (p > 0 && !dropout_generator)
        throw value_error("MultiheadAttention: dropout " + std::to_string(p) +
                          " while training needs dropout_generator (or eval())");
    const char* op = "MultiheadAttention";
    const std::optional<double> scale;  // 1/√D
    SdpaResult<T, 3> r;
    if (masks.ignore && masks.additive)
        r = xgrad::detail::sdpa(q, k, v, p, scale, dropout_generator, op, IgnoreMask<3>{std::move(*masks.ignore)},
                         AdditiveMask<T, 3>{std::move(*masks.additive)});
    else if (masks.ignore)
        r = xgrad::detail::sdpa(q, k, v, p, scale, dropout_generator, op, IgnoreMask<3>{std::move(*masks.ignore)});
    else if (masks.additive)
        r = xgrad::detail::sdpa(q, k, v, p, scale, dropout_generator, op, AdditiveMask<T, 3>{std::move(*masks.additive)});
    else
        r = xgrad::detail::sdpa(q, k, v, p, scale, dropout_generator, op);

    // (N·H, L, D) -> (N, L, E) -> out_proj -> the caller's layout
    const Var<T, 3> out = out_proj(merge_heads(r.output, H));
    MhaOutput<T, N> result;
    if constexpr (batched)
        result.output = options.batch_first ? out : transpose(out, 0, 1);
    else
        result.output = reshape<2>(out, std::array<long, 2>{long(L), long(E)});
    if (opts.need_weights) {
        const Var<T, 4> w = reshape<4>(r.weights, std::array<long, 4>{long(B), long(H), long(L), long(Sp)});
        if (opts.average_attn_weights) {
            const Var<T, 3> avg = mean(w, 1);  // (N, L, S')
            if constexpr (batched)
                result.attn_weights = avg;
            else
                result.attn_weights = reshape<2>(avg, std::array<long, 2>{long(L), long(Sp)});
        } else {
            if constexpr (batched)
                result.attn_weights_per_head = w;
            else
                result.attn_weights_per_head = reshape<3>(w, std::array<long, 3>{long(H), long(L), long(Sp)});
        }
    }
    return result;
}

}  // namespace xgrad::nn
