// The attention internals that tape listings show (tape_graph.hpp, `xgrad inspect`): what the
// attention nodes hold inside without keeping it, recomputed on request from their inputs, values
// and gradients: the scores, the weights of the one-op paths, and their gradients, as the two-op path
// would have them. Nothing here runs in a forward or a backward. The nodes (nn/attention/) declare
// for_each_internal; its definitions are here, and nn/attention/paths.hpp includes this file.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>

#include <xtensor/xtensor.hpp>

#include "xgrad/kernels/attention.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/memory_efficient.hpp"
#include "xgrad/nn/attention/weights_context.hpp"

namespace xgrad::inspect {

// The scores (B·H, L, S) = scale · Q·Kᵀ + masks over every key, -inf where ignored.
template <Real T>
xt::xtensor<T, 3> attention_scores(const nn::detail::HeadOperand<T>& q, const nn::detail::HeadOperand<T>& k, T scale,
                                   const kernels::ScoreMasks<T>& masks) {
    using nn::detail::HeadLayout;
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

}  // namespace xgrad::inspect

namespace xgrad::nn::detail {

// The softmax's input, "scores" (B·H, L, S) = scale · Q·Kᵀ + additive mask, -inf where
// ignored, and its gradient dS = P ⊙ (dP − Σ_j dP ⊙ P) once a backward has reached this node.
template <Real T>
void AttentionWeightsNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source) return;  // inputs released: the tape was cleared
    const std::size_t S = k.layout.len;
    const xt::xtensor<T, 3> scores = inspect::attention_scores(q, k, scale, masks);
    xt::xtensor<T, 3> grad;
    if (this->has_grad()) {
        grad.resize(this->value.shape());
        softmax_backward(grad.data(), T(1), 0, this->value.size() / S, {0, S});
    }
    const ArrayView no_grad{this->view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", this->view_of(scores),
      this->has_grad() ? this->view_of(grad) : no_grad);
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

// The fused op's weights are kept (transposed, live keys only).
template <Real T>
void FusedAttentionNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source || !v.source) return;  // inputs released: the tape was cleared
    const std::size_t L = q.layout.len, S = k.layout.len, ld = this->ld();
    xt::xtensor<T, 3> weights(std::array<std::size_t, 3>{heads(), L, S}, T(0));
    for (std::size_t bh = 0; bh < heads(); ++bh) {
        const T* pt = probs_t.data() + bh * S * ld;
        for (std::size_t j = live[bh].begin; j < live[bh].end; ++j)
            for (std::size_t i = 0; i < L; ++i) weights(bh, i, j) = pt[(j - live[bh].begin) * ld + i];
    }
    visit_attention_internals(f, *this, v, out, inspect::attention_scores(q, k, scale, masks), weights,
                              this->has_grad() ? this->grad_storage()->data() : nullptr);
}

// The memory-efficient op keeps nothing: its weights are the softmax of the recomputed scores.
template <Real T>
void MemoryEfficientAttentionNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source || !v.source) return;  // inputs released: the tape was cleared
    const xt::xtensor<T, 3> scores = inspect::attention_scores(q, k, scale, masks);
    xt::xtensor<T, 3> weights = scores;
    kernels::softmax_rows(weights.data(), weights.size() / k.layout.len, k.layout.len, k.layout.len,
                          kernels::EmptyLine::zeros, kernels::NoMasks<T>{});
    visit_attention_internals(f, *this, v, out, scores, weights, this->has_grad() ? this->grad_storage()->data() : nullptr);
}

}  // namespace xgrad::nn::detail
