// Attention in xgrad: one computation, three paths. Every path reads the same masks (the
// vocabulary of ops/mask.hpp merged by kernels/score_masks.hpp) and runs the same softmax kernels
// (kernels/softmax.hpp); the fast paths compute their scores and apply their masks with the
// routines of their layout (kernels/attention.hpp: rows for weights_and_context, columns for
// fused), and are tested against the reference, output and every gradient, on every mask kind
// (tests/nn/attention_paths.cpp).
//
// | path                  | file                | runs when                                  | why                                      |
// |-----------------------|---------------------|--------------------------------------------|------------------------------------------|
// | reference             | reference.hpp       | scaled_dot_product_attention; MHA when      | plain ops (matmul, masked_softmax,       |
// |                       |                     | asked (MhaForwardOptions::path)            | dropout): each step a node to inspect    |
// | weights_and_context   | weights_context.hpp | MHA with need_weights or dropout           | the weights leave the op: two nodes,     |
// |                       |                     |                                            | heads read in place, strided GEMMs       |
// | fused                 | fused.hpp           | MHA without need_weights and dropout       | the weights stay inside: one node per    |
// |                       |                     | (training loops, the Transformer layers)   | (b, h), scores transposed for SIMD       |
//
// The fast paths skip the keys every query of a head ignores (kernels::ScoreMasks::live_keys).
// Inspection-only recomputation of their internals (scores, weights) is in inspect/attention.hpp.
#pragma once
#include <string>

#include "xgrad/core/error.hpp"
#include "xgrad/inspect/attention.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/mha_masks.hpp"
#include "xgrad/nn/attention/reference.hpp"
#include "xgrad/nn/attention/weights_context.hpp"

namespace xgrad::nn {

// Which path a MultiheadAttention call runs; automatic follows the table above.
enum class AttentionPath { automatic, reference, weights_and_context, fused };

namespace detail {

inline AttentionPath choose_path(AttentionPath asked, bool need_weights, bool dropout) {
    const bool weights_leave = need_weights || dropout;
    if (asked == AttentionPath::automatic)
        return weights_leave ? AttentionPath::weights_and_context : AttentionPath::fused;
    if (asked == AttentionPath::fused && weights_leave)
        throw value_error(std::string("MultiheadAttention: the fused path keeps the weights inside; it cannot run with ") +
                          (need_weights ? "need_weights" : "dropout"));
    return asked;
}

}  // namespace detail
}  // namespace xgrad::nn
