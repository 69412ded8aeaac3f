// The reference attention: scaled dot-product attention composed of plain tape ops, every step a
// node of its own that `xgrad inspect` lists and a test can read (paths.hpp):
//
//   scores  (..., L, S)  = (q · scale) · kᵀ                       matmul
//   weights (..., L, S)  = dropout(masked_softmax(scores, masks))  masked_softmax, dropout
//   output  (..., L, Ev) = weights · v                             matmul
//
// MultiheadAttention runs it when asked for AttentionPath::reference, after copying its heads out
// with reshape and permute, and scaled_dot_product_attention when v's head size differs from q's.
#pragma once
#include <array>
#include <cstddef>

#include "xgrad/core/random.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad {

template <Real T, std::size_t N>
struct SdpaResult {
    Var<T, N> output;   // (..., L, Ev)
    Var<T, N> weights;  // (..., L, S), after dropout (what torch's MHA returns)
};

namespace detail {

// The product per head of a (..., H, L, M) and b (..., H / group, M, Y): head h of a times head
// h / group of b, (..., H, L, Y). The `group` heads of a that share a head of b are stacked into
// one (group·L, M) matrix (a reshape), so b is never repeated.
template <Real T, std::size_t N>
Var<T, N> grouped_matmul(const Var<T, N>& a, const Var<T, N>& b, std::size_t group) {
    if constexpr (N < 3) {  // no heads axis: the callers never group here
        return matmul(a, b);
    } else {
        if (group == 1) return matmul(a, b);
        std::array<long, N> stacked, result;
        for (std::size_t d = 0; d < N; ++d) stacked[d] = result[d] = long(a.shape(d));
        stacked[N - 3] /= long(group), stacked[N - 2] *= long(group);
        result[N - 1] = long(b.shape(N - 1));
        return reshape<N>(matmul(reshape<N>(a, stacked), b), result);
    }
}

// The attention of q (..., L, E) over k (..., S, E) and v (..., S, Ev), masks merged over the
// scores; dropout with probability p (> 0 needs gen). Grouped-query attention with group > 1: q
// (..., H, L, E), k and v (..., H / group, S, E|Ev).
template <Real T, std::size_t N>
SdpaResult<T, N> reference_attention(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v, T scale,
                                     const kernels::ScoreMasks<T>& masks, double p, Generator* gen,
                                     std::size_t group = 1) {
    const Var<T, N> scaled_q = q * scale;
    const Var<T, N> scores = grouped_matmul(scaled_q, transpose(k, -2, -1), group);
    const bool masked = masks.any();
    Var<T, N> weights = masked ? masked_softmax_merged(scores, masks) : softmax(scores, -1);
    if (p > 0) weights = dropout(weights, p, true, *gen);
    return {grouped_matmul(weights, v, group), weights};
}

}  // namespace detail

namespace nn::detail {

// The heads of x copied out: (B, H, len, D), H its own heads (fewer than the query's when grouped).
template <Real T>
Var<T, 4> heads_tensor(const HeadOperand<T>& x, bool batch_first) {
    const HeadLayout& l = x.layout;
    const long B = long(l.batch), L = long(l.len), H = long(l.heads), D = long(l.head_dim);
    const Var<T, 3> columns = slice(x.source, 2, long(l.offset), long(l.offset) + H * D);  // (L, B, E) or (B, L, E)
    const Var<T, 3> by_batch = batch_first ? columns : permute(columns, {1, 0, 2});       // (B, L, E)
    return permute(reshape<4>(by_batch, {B, L, H, D}), {0, 2, 1, 3});
}

// MultiheadAttention's attention by the reference path: {context in the layout of out_shape
// ((L, B, E) or (B, L, E)), weights (B·H, L, S')}.
template <Real T>
std::array<Var<T, 3>, 2> reference_heads_attention(const HeadOperand<T>& q, const HeadOperand<T>& k,
                                                   const HeadOperand<T>& v, T scale, MaskFillerOf<T> fill_masks, double p,
                                                   Generator* gen, bool batch_first) {
    check_head_operands(q.layout, k.layout, v.layout, "attention");
    thread_local kernels::ScoreMasks<T> masks;
    fill_masks(masks);
    const auto r = xgrad::detail::reference_attention(heads_tensor(q, batch_first), heads_tensor(k, batch_first),
                                                      heads_tensor(v, batch_first), scale, masks, p, gen, k.layout.group);
    const long B = long(q.layout.batch), H = long(q.layout.heads), L = long(q.layout.len), D = long(q.layout.head_dim);
    const Var<T, 3> by_batch = reshape<3>(permute(r.output, {0, 2, 1, 3}), {B, L, H * D});  // (B, L, E)
    const Var<T, 3> context = batch_first ? by_batch : permute(by_batch, {1, 0, 2});
    return {context, reshape<3>(r.weights, {B * H, L, long(k.layout.len)})};
}

}  // namespace nn::detail
}  // namespace xgrad
