// Scaled dot-product attention (torch.nn.functional.scaled_dot_product_attention), differentiable
// w.r.t. q, k and v:
//
//   weights = dropout(masked_softmax(q·kᵀ · scale, mask [, causal]))      (..., L, S)
//   output  = weights · v                                                  (..., L, Ev)
//
// The public entry of xgrad's attention: it runs the paths MultiheadAttention and nn::GPT run
// (nn/attention/paths.hpp, chosen as there), its leading axes (...) as their batch of heads; with
// Ev ≠ E, the reference path of plain ops.
// The mask's TYPE says what its entries mean (mask.hpp): keep_mask(m) is SDPA's bool attn_mask
// (true = attend), ignore_mask(m) is MHA's (true = ignore), additive_mask(b) is a float attn_mask,
// valid_lens(v) is d2l's. A fully masked row gives zero weights, zero output and zero gradient
// (PyTorch gives NaN).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/attention/paths.hpp"
#include "xgrad/nn/attention/reference.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad {

// "No mask" for scaled_dot_product_attention(q, k, v, no_mask, dropout_p, ...).
struct no_mask_t {};
inline constexpr no_mask_t no_mask{};

namespace detail {

// q (..., L, E), k (..., S, E), v (..., S, Ev) as a batch of one-head operands (B', len, E) for
// nn::detail::attend, B' the product of the leading axes: the tensor itself at rank 3, else a
// reshape (one flat copy; its gradient is handed back without one).
template <Real T, std::size_t N>
Var<T, 3> as_head_batch(const Var<T, N>& x) {
    if constexpr (N == 3) return x;
    else return reshape<3>(x, {-1L, long(x.shape(N - 2)), long(x.shape(N - 1))});
}

// The query heads each key/value head serves: q (..., Hq, L, E) over k, v (..., Hkv, S, ·) with
// enable_gqa, Hq / Hkv; else 1 (every leading dim equal). Throws shape_error naming op.
template <Real T, std::size_t N>
std::size_t query_group(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v, bool enable_gqa, const char* op) {
    const auto &sq = q.shape(), &sk = k.shape(), &sv = v.shape();
    const std::string shapes = ": q " + shape_str(sq) + ", k " + shape_str(sk) + " and v " + shape_str(sv);
    if (enable_gqa && N < 3)
        throw shape_error(std::string(op) + ": enable_gqa needs a heads axis, q, k, v of rank >= 3 (..., H, L, E)" +
                          shapes);
    const std::size_t heads_axis = enable_gqa ? N - 3 : N;  // N: none
    for (std::size_t d = 0; d + 2 < N; ++d)
        if (d != heads_axis && (sq[d] != sk[d] || sq[d] != sv[d]))
            throw shape_error(std::string(op) + ": q, k and v need the same leading dims" +
                              (enable_gqa ? " but the heads (-3)" : "") + shapes);
    if (!enable_gqa) return 1;
    const std::size_t Hq = sq[N - 3], Hkv = sk[N - 3];
    if (sv[N - 3] != Hkv || Hkv == 0 || Hq % Hkv != 0)
        throw shape_error(std::string(op) + ": enable_gqa needs k and v with the same number of heads, dividing q's" +
                          shapes);
    return Hq / Hkv;
}

// `masks` are any SoftmaxMasks (all of them apply); `op` names the caller in errors; enable_gqa:
// q (..., Hq, L, E) over k and v (..., Hkv, S, ·), query head h reading key/value head h / (Hq / Hkv).
template <bool Weights, Real T, std::size_t N, SoftmaxMask... Masks>
SdpaResult<T, N> sdpa(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v, double dropout_p,
                      std::optional<double> scale, Generator* gen, bool enable_gqa, const char* op,
                      const Masks&... masks) {
    static_assert(N >= 2, "xgrad: scaled_dot_product_attention needs q, k, v of rank >= 2 (..., L, E)");
    require_var(q, op, "q"), require_var(k, op, "k"), require_var(v, op, "v");
    const auto &sq = q.shape(), &sk = k.shape(), &sv = v.shape();
    const std::string who = op;
    if (sq[N - 1] != sk[N - 1])
        throw shape_error(who + ": q and k need the same last dim E: q " + shape_str(sq) + " and k " + shape_str(sk));
    if (sk[N - 2] != sv[N - 2])
        throw shape_error(who + ": k and v need the same sequence length S: k " + shape_str(sk) + " and v " +
                          shape_str(sv));
    const std::size_t group = query_group(q, k, v, enable_gqa, op);
    if (!(dropout_p >= 0 && dropout_p <= 1))
        throw value_error(who + ": dropout_p must be in [0, 1], got " + std::to_string(dropout_p));
    if (dropout_p > 0 && !gen) throw value_error(who + ": dropout_p > 0 needs a Generator");
    if (scale && !std::isfinite(*scale))
        throw value_error(who + ": scale must be finite, got " + std::to_string(*scale));
    const double s = scale ? *scale : 1.0 / std::sqrt(double(sq[N - 1]));
    // the masks merged against the scores (..., L, S) before anything is recorded; errors name op
    std::array<std::size_t, N> scores_shape;
    std::copy(sq.begin(), sq.end(), scores_shape.begin());
    scores_shape[N - 1] = sk[N - 2];
    const kernels::ScoreMasks<T>& merged = xgrad::detail::merged_masks<T>(scores_shape, op, masks...);
    if (sv[N - 1] != sq[N - 1]) return reference_attention(q, k, v, T(s), merged, dropout_p, gen, group);

    // one-head operands (B', len, E); a key/value operand serves `group` consecutive query heads
    const Var<T, 3> q3 = as_head_batch(q), k3 = as_head_batch(k), v3 = as_head_batch(v);
    const auto heads = [](const Var<T, 3>& x, std::size_t serves) {
        nn::detail::HeadOperand<T> h{x, nn::detail::HeadLayout::of(x.shape(), true, 1, x.shape(2), 0)};
        h.layout.group = serves;
        return h;
    };
    const auto fill_masks = [&](kernels::ScoreMasks<T>& out) {
        out.reset(scores_shape);
        (merge_mask(out, masks, scores_shape, op), ...);
    };
    const nn::detail::AttendOptions o{.need_weights = Weights, .dropout = dropout_p, .generator = gen,
                                      .batch_first = true, .causal = (std::same_as<Masks, causal_t> || ...)};
    const auto r = nn::detail::attend(heads(q3, 1), heads(k3, group), heads(v3, group), T(s), fill_masks, o, q3.shape());
    std::array<long, N> out_shape, weights_shape;
    std::copy(sq.begin(), sq.end(), out_shape.begin());
    std::copy(scores_shape.begin(), scores_shape.end(), weights_shape.begin());
    if constexpr (N == 3) return {r.context, r.weights};
    else return {reshape<N>(r.context, out_shape), Weights ? reshape<N>(r.weights, weights_shape) : Var<T, N>{}};
}

}  // namespace detail

// scaled_dot_product_attention(q (..., L, E), k (..., S, E), v (..., S, Ev)) -> (..., L, Ev), with
// torch's argument order: mask (no_mask or a SoftmaxMask), dropout_p (needs gen when > 0; applied
// on every call: pass 0 in eval), is_causal (the (L, S) top-left causal mask; combines with `mask`:
// a position masked by either is masked), scale (default 1/√E), then xgrad's gen and torch's
// enable_gqa. Leading dims of q, k, v must be equal; with enable_gqa (grouped-query attention)
// but the heads axis: q (..., Hq, L, E), k and v (..., Hkv, S, ·) with Hkv dividing Hq, query head h
// attending with key/value head h / (Hq / Hkv), read in place (never repeated in memory).
template <Real T, std::size_t N>
Var<T, N> scaled_dot_product_attention(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v,
                                       no_mask_t = no_mask, double dropout_p = 0, bool is_causal = false,
                                       std::optional<double> scale = std::nullopt, Generator* gen = nullptr,
                                       bool enable_gqa = false) {
    const char* op = "scaled_dot_product_attention";
    return is_causal ? detail::sdpa<false>(q, k, v, dropout_p, scale, gen, enable_gqa, op, causal).output
                     : detail::sdpa<false>(q, k, v, dropout_p, scale, gen, enable_gqa, op).output;
}
template <Real T, std::size_t N, SoftmaxMask M>
Var<T, N> scaled_dot_product_attention(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v, const M& mask,
                                       double dropout_p = 0, bool is_causal = false,
                                       std::optional<double> scale = std::nullopt, Generator* gen = nullptr,
                                       bool enable_gqa = false) {
    const char* op = "scaled_dot_product_attention";
    return is_causal ? detail::sdpa<false>(q, k, v, dropout_p, scale, gen, enable_gqa, op, mask, causal).output
                     : detail::sdpa<false>(q, k, v, dropout_p, scale, gen, enable_gqa, op, mask).output;
}

// The same, also returning the attention weights (..., L, S) (after dropout).
template <Real T, std::size_t N, class M = no_mask_t>
    requires(SoftmaxMask<M> || std::same_as<M, no_mask_t>)
SdpaResult<T, N> scaled_dot_product_attention_with_weights(const Var<T, N>& q, const Var<T, N>& k,
                                                           const Var<T, N>& v, const M& mask = {},
                                                           double dropout_p = 0, bool is_causal = false,
                                                           std::optional<double> scale = std::nullopt,
                                                           Generator* gen = nullptr, bool enable_gqa = false) {
    const char* op = "scaled_dot_product_attention";
    if constexpr (std::same_as<M, no_mask_t>)
        return is_causal ? detail::sdpa<true>(q, k, v, dropout_p, scale, gen, enable_gqa, op, causal)
                         : detail::sdpa<true>(q, k, v, dropout_p, scale, gen, enable_gqa, op);
    else
        return is_causal ? detail::sdpa<true>(q, k, v, dropout_p, scale, gen, enable_gqa, op, mask, causal)
                         : detail::sdpa<true>(q, k, v, dropout_p, scale, gen, enable_gqa, op, mask);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): without a mask, of rank 3 and 4.
namespace xgrad {
#define XGRAD_DETAIL_SDPA_COMPILED(EXTERN, T, N)                                                                   \
    EXTERN template Var<T, N> scaled_dot_product_attention<T, N>(const Var<T, N>&, const Var<T, N>&, const Var<T, N>&, \
                                                                 no_mask_t, double, bool, std::optional<double>,      \
                                                                 Generator*, bool);
#define XGRAD_DETAIL_SDPAS_COMPILED(EXTERN, T) \
    XGRAD_DETAIL_SDPA_COMPILED(EXTERN, T, 3) XGRAD_DETAIL_SDPA_COMPILED(EXTERN, T, 4)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_SDPAS_COMPILED)
#undef XGRAD_DETAIL_SDPAS_COMPILED
#undef XGRAD_DETAIL_SDPA_COMPILED
}  // namespace xgrad
