// Attention in xgrad: one computation, four paths. Every path reads the same masks (the
// vocabulary of ops/mask.hpp merged by kernels/score_masks.hpp) and runs the same softmax kernels
// (kernels/softmax.hpp, kernels/softmax_columns.hpp); the fast paths compute their scores and apply their masks with the
// routines of their layout (kernels/attention_scores.hpp: rows for weights_and_context and
// memory_efficient, columns for fused), and are tested against the reference, output and every
// gradient, on every mask kind (tests/nn/attention_paths.cpp).
//
// | path                  | file                 | runs when (automatic)                     | why                                      |
// |-----------------------|----------------------|-------------------------------------------|------------------------------------------|
// | reference             | reference.hpp        | when asked (MhaForwardOptions::path);      | plain ops (matmul, masked_softmax,       |
// |                       |                      | scaled_dot_product_attention with Ev ≠ E   | dropout): each step a node to inspect    |
// | weights_and_context   | weights_context.hpp  | need_weights or dropout; otherwise what    | the weights leave the op: two nodes,     |
// |                       |                      | fused runs, under Autocast(bfloat16)       | heads read in place, strided GEMMs       |
// | fused                 | fused.hpp            | the rest (float32, float64)                | the weights stay inside: one node per    |
// |                       |                      |                                            | (b, h), scores transposed for SIMD       |
// | memory_efficient      | memory_efficient.hpp | causal with L·S ≥ long_causal_attention,   | nothing of size L·S kept: blocks of      |
// |                       |                      | or B·H·L·S ≥ large_attention_state         | queries, recomputed in backward          |
//
// The fast paths skip the keys every query of a head ignores (kernels::ScoreMasks::live_keys);
// memory_efficient also skips, block by block, the keys a causal mask hides.
// The heads' layout the one-op paths share and the inspection-only recomputation of their
// internals (scores, weights) are in fused.hpp; the hook points (q, k, v, scores, pattern, z) in
// hooked.hpp.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "xgrad/core/error.hpp"
#include "xgrad/core/precision.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/hooked.hpp"
#include "xgrad/nn/attention/memory_efficient.hpp"
#include "xgrad/nn/attention/mha_masks.hpp"
#include "xgrad/nn/attention/reference.hpp"
#include "xgrad/nn/attention/weights_context.hpp"
#include "xgrad/ops/dropout.hpp"

namespace xgrad::nn {

// Which path a MultiheadAttention call runs; automatic follows the table above.
enum class AttentionPath { automatic, reference, weights_and_context, fused, memory_efficient };

// The path's name as written above ("memory_efficient").
inline const char* path_name(AttentionPath path) {
    constexpr const char* names[] = {"automatic", "reference", "weights_and_context", "fused", "memory_efficient"};
    return names[int(path)];
}

namespace detail {

// When automatic runs memory_efficient (measured: docs/performance.md, "Attention in O(L) memory").
// Causal, from L·S = 512² per head: it skips the masked half of the scores, and outruns the fused
// path (a GPT-2 step at T = 512 3 %, at 1024 9 % faster). Otherwise its recomputation costs 3–10 %
// against the fused path, which it replaces only where the state that one keeps, B·H·L·S scores
// (2^26: 256 MB in float32), would weigh more than the time.
inline constexpr std::size_t long_causal_attention = 512 * 512;
inline constexpr std::size_t large_attention_state = std::size_t(1) << 26;

// What choose_path weighs besides the asked path.
struct PathNeeds {
    bool need_weights = false, dropout = false;
    std::size_t heads = 1, queries = 0, keys = 0;  // B·H, L, S
    bool causal = false;    // the masks include a causal one
    bool bfloat16 = false;  // float32 under Autocast(bfloat16)
};

// Under Autocast(bfloat16) the fused path, which multiplies with xgrad's own float32 kernel, not
// kernels::gemm, does not run: the others' products take bfloat16 operands like every matmul.
inline AttentionPath choose_path(AttentionPath asked, const PathNeeds& n) {
    const bool weights_leave = n.need_weights || n.dropout;
    if (asked == AttentionPath::automatic) {
        const std::size_t per_head = n.queries * n.keys;
        if (weights_leave) return AttentionPath::weights_and_context;
        if ((n.causal && per_head >= long_causal_attention) || n.heads * per_head >= large_attention_state)
            return AttentionPath::memory_efficient;
        return n.bfloat16 ? AttentionPath::weights_and_context : AttentionPath::fused;
    }
    const bool one_op = asked == AttentionPath::fused || asked == AttentionPath::memory_efficient;
    if (one_op && weights_leave)
        throw value_error(std::string("MultiheadAttention: the ") + path_name(asked) +
                          " path keeps the weights inside; it cannot run with " + (n.need_weights ? "need_weights" : "dropout"));
    if (asked == AttentionPath::fused && n.bfloat16)
        throw value_error("MultiheadAttention: the fused path multiplies in float32; under Autocast(bfloat16) ask for "
                          "another path");
    return asked;
}

// What one attention call asks, besides its operands and masks.
struct AttendOptions {
    AttentionPath path = AttentionPath::automatic;
    bool need_weights = false;  // the weights leave the op (MhaOutput's attn_weights, heads studies)
    double dropout = 0;         // on the weights (training only: the caller passes 0 in eval)
    Generator* generator = nullptr;  // dropout's masks; needed when dropout > 0
    bool batch_first = true;    // the layout of the output (L, B, E) or (B, L, E)
    bool causal = false;        // the masks include a causal one (weighed by the automatic path)
    // The caller passed q, k and v through their hook points itself (nn::Llama: hook_q before its
    // rotary embedding, hook_rot_q after): attend does not hook them again.
    bool operands_hooked = false;
};

template <Real T>
struct AttendResult {
    Var<T, 3> context;  // the output's layout, (L, B, E) or (B, L, E): head h in columns [h·D, (h+1)·D)
    Var<T, 3> weights;  // (B·H, L, S) after dropout; empty on the one-op paths (fused, memory_efficient)
};

// The attention of projected heads, on the path of the table above: weights (B·H, L, S) =
// dropout(masked_softmax(scale · q·kᵀ, masks)); context (.., E) = weights · v per head, written in
// `out_shape`. fill_masks(kernels::ScoreMasks<T>&) merges the caller's masks. Every caller
// (scaled_dot_product_attention, MultiheadAttention, nn::GPT's causal self-attention) goes through it.
template <Real T>
AttendResult<T> attend_on_path(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v, T scale,
                               MaskFillerOf<T> fill_masks, const AttendOptions& o,
                               const std::array<std::size_t, 3>& out_shape) {
    const HeadLayout out_heads = HeadLayout::of(out_shape, o.batch_first, q.layout.heads, q.layout.head_dim, 0);
    AttendResult<T> r;
    const bool bfloat16 = std::is_same_v<T, float> && matmul_precision() == MatmulPrecision::bfloat16;
    const PathNeeds needs{.need_weights = o.need_weights, .dropout = o.dropout > 0,
                          .heads = q.layout.batch * q.layout.heads, .queries = q.layout.len, .keys = k.layout.len,
                          .causal = o.causal, .bfloat16 = bfloat16};
    switch (choose_path(o.path, needs)) {
    case AttentionPath::fused:
        r.context = fused_attention(q, k, v, scale, fill_masks, out_heads, out_shape);
        break;
    case AttentionPath::memory_efficient:
        r.context = memory_efficient_attention(q, k, v, scale, fill_masks, out_heads, out_shape);
        break;
    case AttentionPath::reference: {
        const auto [ctx, w] = reference_heads_attention(q, k, v, scale, fill_masks, o.dropout, o.generator, o.batch_first);
        r.context = ctx, r.weights = w;
        break;
    }
    default: {
        const Var<T, 3> probabilities = named(attention_weights(q, k, scale, fill_masks), "weights");
        r.weights = o.dropout > 0 ? named(dropout(probabilities, o.dropout, true, *o.generator), "weights.dropout")
                                  : probabilities;
        r.context = attention_context(r.weights, v, out_heads, out_shape, live_keys_of(probabilities));
    }
    }
    named(r.context, "context");
    return r;
}

// attend_on_path, or with the attention's hook points when a hook wants one (hooked.hpp).
template <Real T>
AttendResult<T> attend(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v, T scale,
                       MaskFillerOf<T> fill_masks, const AttendOptions& o, const std::array<std::size_t, 3>& out_shape) {
    if (!attention_hooks_wanted()) return attend_on_path(q, k, v, scale, fill_masks, o, out_shape);
    const auto hooked = [&](const HeadOperand<T>& x, const char* name) {
        return o.operands_hooked ? x : hooked_heads(x, name);
    };
    const HeadOperand<T> hq = hooked(q, "hook_q"), hk = hooked(k, "hook_k"), hv = hooked(v, "hook_v");
    AttendResult<T> r;
    if (attention_inside_wanted()) {
        const auto [context, weights] =
            hooked_reference_attention(hq, hk, hv, scale, fill_masks, o.dropout, o.generator, o.batch_first);
        r.context = context, r.weights = weights;
    } else {
        r = attend_on_path(hq, hk, hv, scale, fill_masks, o, out_shape);
        r.context = hooked_context(r.context, o.batch_first, q.layout.heads);
    }
    named(r.context, "context");
    return r;
}

}  // namespace detail
}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): every path, whatever the caller's masks
// (MaskFiller), so that a caller's unit instantiates none of them.
namespace xgrad {
#define XGRAD_DETAIL_ATTENTION_PATHS_COMPILED(EXTERN, T)                                                               \
    EXTERN template nn::detail::AttendResult<T> nn::detail::attend<T>(                                                 \
        const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, T,    \
        nn::detail::MaskFillerOf<T>, const nn::detail::AttendOptions&, const std::array<std::size_t, 3>&);           \
    EXTERN template Var<T, 3> nn::detail::fused_attention<T>(                                                          \
        const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, T,    \
        nn::detail::MaskFillerOf<T>, const nn::detail::HeadLayout&, const std::array<std::size_t, 3>&);              \
    EXTERN template Var<T, 3> nn::detail::memory_efficient_attention<T>(                                               \
        const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, const nn::detail::HeadOperand<T>&, T,    \
        nn::detail::MaskFillerOf<T>, const nn::detail::HeadLayout&, const std::array<std::size_t, 3>&, std::size_t); \
    EXTERN template Var<T, 3> nn::detail::attention_weights<T>(const nn::detail::HeadOperand<T>&,                      \
                                                               const nn::detail::HeadOperand<T>&, T,                   \
                                                               nn::detail::MaskFillerOf<T>);
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_ATTENTION_PATHS_COMPILED)
#undef XGRAD_DETAIL_ATTENTION_PATHS_COMPILED
}  // namespace xgrad
