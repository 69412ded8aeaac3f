// The attention internals that tape listings show (tape_graph.hpp, `xgrad inspect`): what the
// attention nodes hold inside without keeping it, recomputed on request from their inputs, values
// and gradients: the scores, the weights of the fused op, and their gradients, as the two-op path
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

// As the two-op path shows them: "scores" (B·H, L, S) = scale · Q·Kᵀ + masks, -inf where
// ignored, and "weights" P (B·H, L, S), 0 outside the live keys; once a backward has reached the
// node, their gradients dS = P ⊙ (dP − Σ_j dP ⊙ P) and dP = dO·Vᵀ (every column). Recomputed.
template <Real T>
void FusedAttentionNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source || !v.source) return;  // inputs released: the tape was cleared
    const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
    const std::size_t L = ql.len, S = kl.len, D = ql.head_dim, ld = this->ld();
    const std::array<std::size_t, 3> shape{heads(), L, S};
    const xt::xtensor<T, 3> scores = inspect::attention_scores(q, k, scale, masks);
    xt::xtensor<T, 3> weights(shape, T(0)), dscores, dweights;
    for (std::size_t bh = 0; bh < heads(); ++bh) {
        const T* pt = probs_t.data() + bh * S * ld;
        for (std::size_t j = live[bh].begin; j < live[bh].end; ++j)
            for (std::size_t i = 0; i < L; ++i) weights(bh, i, j) = pt[(j - live[bh].begin) * ld + i];
    }
    if (this->has_grad()) {
        dscores.resize(shape), dweights.resize(shape);
        const T* dO = this->grad_storage()->data();
        for (std::size_t bh = 0; bh < heads(); ++bh)  // dP_bh (L, S) = dO_bh (L, D) · V_bhᵀ (D, S)
            kernels::gemm(kernels::Op::none, kernels::Op::trans, L, S, D, T(1), dO + out.at(bh), out.seq_stride,
                          v.head(bh), vl.seq_stride, T(0), dweights.data() + bh * L * S, S);
        kernels::softmax_backward_rows(weights.data(), dweights.data(), dscores.data(), S, 0, heads() * L, 0, S, T(1));
    }
    const ArrayView no_grad{this->view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", this->view_of(scores),
      this->has_grad() ? this->view_of(dscores) : no_grad);
    f("weights", "softmax(scores), P", this->view_of(weights), this->has_grad() ? this->view_of(dweights) : no_grad);
}

}  // namespace xgrad::nn::detail
