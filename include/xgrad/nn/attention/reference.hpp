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
#include "xgrad/nn/attention/heads.hpp"
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

// The attention of q (..., L, E) over k (..., S, E) and v (..., S, Ev), masks merged over the
// scores; dropout with probability p (> 0 needs gen).
template <Real T, std::size_t N>
SdpaResult<T, N> reference_attention(const Var<T, N>& q, const Var<T, N>& k, const Var<T, N>& v, T scale,
                                     const kernels::ScoreMasks<T>& masks, double p, Generator* gen) {
    const Var<T, N> scaled_q = q * scale;
    const Var<T, N> scores = matmul(scaled_q, transpose(k, -2, -1));
    const bool masked = masks.any();
    Var<T, N> weights = masked ? masked_softmax_merged(scores, masks) : softmax(scores, -1);
    if (p > 0) weights = dropout(weights, p, true, *gen);
    return {matmul(weights, v), weights};
}

}  // namespace detail

namespace nn::detail {

// The heads of x copied out: (B, H, len, D).
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
template <Real T, class FillMasks>
std::array<Var<T, 3>, 2> reference_heads_attention(const HeadOperand<T>& q, const HeadOperand<T>& k,
                                                   const HeadOperand<T>& v, T scale, FillMasks fill_masks, double p,
                                                   Generator* gen, bool batch_first) {
    check_head_operands(q.layout, k.layout, "query and key");
    check_head_operands(k.layout, v.layout, "key and value");
    thread_local kernels::ScoreMasks<T> masks;
    fill_masks(masks);
    const auto r = xgrad::detail::reference_attention(heads_tensor(q, batch_first), heads_tensor(k, batch_first),
                                                      heads_tensor(v, batch_first), scale, masks, p, gen);
    const long B = long(q.layout.batch), H = long(q.layout.heads), L = long(q.layout.len), D = long(q.layout.head_dim);
    const Var<T, 3> by_batch = reshape<3>(permute(r.output, {0, 2, 1, 3}), {B, L, H * D});  // (B, L, E)
    const Var<T, 3> context = batch_first ? by_batch : permute(by_batch, {1, 0, 2});
    return {context, reshape<3>(r.weights, {B * H, L, long(k.layout.len)})};
}

}  // namespace nn::detail
}  // namespace xgrad
