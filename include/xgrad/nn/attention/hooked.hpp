// The hook points of every attention (core/hooks.hpp), TransformerLens's names, under the caller's
// NameScopes ("blocks.0.attn.hook_z", "encoder.layers.1.self_attn.hook_pattern"):
//
//   hook_q, hook_k, hook_v   (B, L or S, H, D)   each head's query, key, value rows (k and v:
//                                                their own heads, H / group under grouped-query attention)
//   hook_attn_scores         (B, H, L, S)        scale·q·kᵀ with the masks applied (an ignored key
//                                                -inf, additive masks added), before the softmax
//   hook_pattern             (B, H, L, S)        the softmax of the scores, before dropout
//   hook_z                   (B, L, H, D)        each head's output, before the out-projection
//
// They exist only while a hook wants one (attend() asks attention_hooks_wanted()). Hooks on q, k, v
// or z leave the call on its path, which then reads the heads from the hooked tensors; a hook on
// the scores or the pattern takes the reference path's plain ops, which form them.
#pragma once
#include <array>
#include <cstddef>
#include <limits>

#include "xgrad/core/hooks.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/reference.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad::nn::detail {

inline bool attention_hooks_wanted() {
    if (!active_hooks()) return false;
    for (const char* name : {"hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern", "hook_z"})
        if (hook_wanted(name)) return true;
    return false;
}
inline bool attention_inside_wanted() { return hook_wanted("hook_attn_scores") || hook_wanted("hook_pattern"); }

// The heads of x (B, len, H, D), read through its layout (one gather; a cache's rows past len left).
template <Real T>
Var<T, 4> heads_by_position(const HeadOperand<T>& x) {
    const HeadLayout& l = x.layout;
    xgrad::detail::StridedMap map;
    map.offset = l.offset;
    map.push(l.batch, l.batch_stride), map.push(l.len, l.seq_stride), map.push(l.heads, l.head_dim);
    map.push(l.head_dim, 1);
    return xgrad::detail::gather<4>(x.source, std::array{l.batch, l.len, l.heads, l.head_dim}, map, "heads");
}

// x through hook point `name` when a hook wants it: the heads formed, hooked, and read back as a
// batch-first operand.
template <Real T>
HeadOperand<T> hooked_heads(const HeadOperand<T>& x, const char* name) {
    if (!hook_wanted(name)) return x;
    const HeadLayout& l = x.layout;
    const Var<T, 4> heads = hook_point(heads_by_position(x), name);  // (B, len, H, D)
    const Var<T, 3> rows = reshape<3>(heads, {long(l.batch), long(l.len), long(l.heads * l.head_dim)});
    HeadLayout batch_first = HeadLayout::of({l.batch, l.len, l.heads * l.head_dim}, true, l.heads, l.head_dim, 0);
    batch_first.group = l.group;
    return {rows, batch_first};
}

// hook_z on a context in its output layout ((B, L, E) or (L, B, E)): the heads (B, L, H, D) hooked,
// then back in that layout.
template <Real T>
Var<T, 3> hooked_context(const Var<T, 3>& context, bool batch_first, std::size_t heads) {
    if (!hook_wanted("hook_z")) return context;
    const long B = long(context.shape(batch_first ? 0 : 1)), L = long(context.shape(batch_first ? 1 : 0));
    const long E = long(context.shape(2)), H = long(heads), D = E / H;
    const Var<T, 3> by_batch = batch_first ? context : permute(context, {1, 0, 2});  // (B, L, E)
    const Var<T, 4> z = hook_point(reshape<4>(by_batch, {B, L, H, D}), "hook_z");
    const Var<T, 3> back = reshape<3>(z, {B, L, E});
    return batch_first ? back : permute(back, {1, 0, 2});
}

// masks as one additive tensor of the scores' shape (B·H, L, S) read as `shape`: -inf where a key
// is ignored, the additive masks' values elsewhere.
template <Real T>
xt::xtensor<T, 4> dense_masks(const kernels::ScoreMasks<T>& masks, const std::array<std::size_t, 4>& shape) {
    xt::xtensor<T, 4> dense = xt::zeros<T>(shape);
    const std::size_t S = shape[3], rows = dense.size() / S;
    for (std::size_t r = 0; r < rows; ++r) {
        T* row = dense.data() + r * S;
        const T* add = masks.additive.row(r);
        for (std::size_t j = 0; j < S; ++j)
            if (masks.ignores_key(r, j)) row[j] = -std::numeric_limits<T>::infinity();
            else if (add && j < masks.additive.width) row[j] = add[j];
    }
    return dense;
}

// The attention by plain ops with every hook point: {context in the layout of out_shape, weights
// (B·H, L, S) after dropout}. q, k, v already went through their hooks.
template <Real T>
std::array<Var<T, 3>, 2> hooked_reference_attention(const HeadOperand<T>& q, const HeadOperand<T>& k,
                                                    const HeadOperand<T>& v, T scale, MaskFillerOf<T> fill_masks,
                                                    double p, Generator* gen, bool batch_first) {
    check_head_operands(q.layout, k.layout, v.layout, "attention");
    const std::size_t B = q.layout.batch, H = q.layout.heads, L = q.layout.len, S = k.layout.len;
    const auto by_head = [](const HeadOperand<T>& x) { return permute(heads_by_position(x), {0, 2, 1, 3}); };
    const std::size_t group = k.layout.group;
    // (B, H, L, S)
    const Var<T, 4> scaled_q = by_head(q) * scale;
    const Var<T, 4> scores = xgrad::detail::grouped_matmul(scaled_q, transpose(by_head(k), -2, -1), group);
    thread_local kernels::ScoreMasks<T> masks;
    fill_masks(masks);
    const Var<T, 4> masked = hook_point(masks.any() ? scores + constant(dense_masks(masks, {B, H, L, S})) : scores,
                                        "hook_attn_scores");
    // the ignored keys are -inf in the scores now: the softmax's ignore rows make an all-ignored row 0,
    // as on every other path, and the additive values are not added twice
    kernels::ScoreMasks<T> ignore_only = masks;
    ignore_only.additive.used = false;
    const Var<T, 4> pattern = hook_point(
        ignore_only.any() ? xgrad::detail::masked_softmax_merged(masked, ignore_only) : softmax(masked, -1),
        "hook_pattern");
    const Var<T, 4> weights = p > 0 ? dropout(pattern, p, true, *gen) : pattern;
    const Var<T, 4> z = hook_point(permute(xgrad::detail::grouped_matmul(weights, by_head(v), group), {0, 2, 1, 3}),
                                   "hook_z");  // (B, L, H, D)
    const Var<T, 3> by_batch = reshape<3>(z, {long(B), long(L), long(H * q.layout.head_dim)});
    return {batch_first ? by_batch : permute(by_batch, {1, 0, 2}), reshape<3>(weights, {long(B * H), long(L), long(S)})};
}

}  // namespace xgrad::nn::detail
