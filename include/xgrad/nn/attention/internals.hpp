// What the attention nodes hold inside without keeping it, for tape listings (`xgrad inspect`,
// inspect/tape_graph.hpp): recomputed on request by each node's for_each_internal from its inputs,
// value and gradient, as the two-op path would have them. Nothing here runs in a forward or a
// backward.
#pragma once
#include <cstddef>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/var.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/nn/attention/heads.hpp"

namespace xgrad::nn::detail {

// The scores (B·H, L, S) = scale · Q·Kᵀ + masks over every key, -inf where ignored.
template <Real T>
xt::xtensor<T, 3> attention_scores(const HeadOperand<T>& q, const HeadOperand<T>& k, T scale,
                                   const kernels::ScoreMasks<T>& masks) {
    const HeadLayout &ql = q.layout, &kl = k.layout;
    const std::size_t L = ql.len, S = kl.len, heads = ql.batch * ql.heads;
    xt::xtensor<T, 3> scores({heads, L, S});
    for (std::size_t bh = 0; bh < heads; ++bh) {
        T* s = scores.data() + bh * L * S;
        kernels::scores_rows(q.head(bh), ql.seq_stride, k.head(bh), kl.seq_stride, L, S, ql.head_dim, scale, s, S);
        kernels::RowMasks<T>{masks, bh * L, {0, S, true}}.apply(s, L, S);
    }
    return scores;
}

// What the one-op paths show, as the two-op path would: "scores" (B·H, L, S) = scale · Q·Kᵀ +
// masks, -inf where ignored, and "weights" P (B·H, L, S), 0 outside the live keys; once a backward
// has reached the node (dO not null), their gradients dS = P ⊙ (dP − Σ_j dP ⊙ P) and dP = dO·Vᵀ
// (every column).
template <Real T>
void visit_attention_internals(const Node::InternalVisitor& f, const TensorNode<T, 3>& node, const HeadOperand<T>& v,
                               const HeadLayout& out, const xt::xtensor<T, 3>& scores, const xt::xtensor<T, 3>& weights,
                               const T* dO) {
    const std::size_t heads = weights.shape(0), L = weights.shape(1), S = weights.shape(2), D = v.layout.head_dim;
    xt::xtensor<T, 3> dscores, dweights;
    if (dO) {
        dscores.resize(weights.shape()), dweights.resize(weights.shape());
        for (std::size_t bh = 0; bh < heads; ++bh)  // dP_bh (L, S) = dO_bh (L, D) · V_bhᵀ (D, S)
            kernels::gemm(kernels::Op::none, kernels::Op::trans, L, S, D, T(1), dO + out.at(bh), out.seq_stride,
                          v.head(bh), v.layout.seq_stride, T(0), dweights.data() + bh * L * S, S);
        kernels::softmax_backward_rows(weights.data(), dweights.data(), dscores.data(), S, 0, heads * L, 0, S, T(1));
    }
    const ArrayView no_grad{node.view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", node.view_of(scores), dO ? node.view_of(dscores) : no_grad);
    f("weights", "softmax(scores), P", node.view_of(weights), dO ? node.view_of(dweights) : no_grad);
}

}  // namespace xgrad::nn::detail
