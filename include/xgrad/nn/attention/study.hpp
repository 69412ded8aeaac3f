// Inspection only (xgrad inspect, core/inspect.hpp): what the attention nodes hold inside without
// keeping it, recomputed on request from their inputs, values and gradients: the scores, the
// weights of the fused op, and their gradients. Nothing here runs in a forward or a backward.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>

#include <xtensor/xtensor.hpp>

#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/weights_context.hpp"
#include "xgrad/ops/blas.hpp"
#include "xgrad/ops/softmax_kernels.hpp"

namespace xgrad::nn::detail {

// For study: the scores (B·H, L, S) = scale · Q·Kᵀ + masks over every key, -inf where ignored.
template <Real T>
xt::xtensor<T, 3> study_scores(const HeadOperand<T>& q, const HeadOperand<T>& k, T scale, const ScoreMasks<T>& masks) {
    const HeadLayout &ql = q.layout, &kl = k.layout;
    const std::size_t L = ql.len, S = kl.len;
    xt::xtensor<T, 3> scores({ql.batch * ql.heads, L, S});
    for (std::size_t bh = 0; bh < ql.batch * ql.heads; ++bh) {
        const std::size_t b = bh / ql.heads, h = bh % ql.heads;
        blas::gemm(blas::Op::none, blas::Op::trans, L, S, ql.head_dim, scale, q.source.value().data() + ql.at(b, h),
                   ql.seq_stride, k.source.value().data() + kl.at(b, h), kl.seq_stride, T(0), scores.data() + bh * L * S, S);
    }
    for (std::size_t r = 0; r < scores.size() / std::max<std::size_t>(S, 1); ++r)
        xgrad::detail::apply_masks_row(scores.data() + r * S, S, masks.ignore.row(r), masks.additive.row(r));
    return scores;
}

// For study: the softmax's input, "scores" (B·H, L, S) = scale · Q·Kᵀ + additive mask, -inf where
// ignored, and its gradient dS = P ⊙ (dP − Σ_j dP ⊙ P) once a backward has reached this node.
template <Real T>
void AttentionWeightsNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source) return;  // inputs released: the tape was cleared
    const std::size_t S = k.layout.len;
    const xt::xtensor<T, 3> scores = study_scores(q, k, scale, masks);
    xt::xtensor<T, 3> grad;
    if (this->has_grad()) {
        grad.resize(this->value.shape());
        softmax_backward(grad.data(), T(1), 0, this->value.size() / S, {0, S});
    }
    const ArrayView no_grad{this->view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", this->view_of(scores),
      this->has_grad() ? this->view_of(grad) : no_grad);
}

// For study, as the two-op path shows them: "scores" (B·H, L, S) = scale · Q·Kᵀ + masks, -inf where
// ignored, and "weights" P (B·H, L, S), 0 outside the live keys; once a backward has reached the
// node, their gradients dS = P ⊙ (dP − Σ_j dP ⊙ P) and dP = dO·Vᵀ (every column). Recomputed.
template <Real T>
void FusedAttentionNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source || !v.source) return;  // inputs released: the tape was cleared
    const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
    const std::size_t L = ql.len, S = kl.len, D = ql.head_dim, ld = this->ld();
    const std::array<std::size_t, 3> shape{heads(), L, S};
    const xt::xtensor<T, 3> scores = study_scores(q, k, scale, masks);
    xt::xtensor<T, 3> weights(shape, T(0)), dscores, dweights;
    for (std::size_t bh = 0; bh < heads(); ++bh) {
        const T* pt = probs_t.data() + bh * S * ld;
        for (std::size_t j = live[bh].begin; j < live[bh].end; ++j)
            for (std::size_t i = 0; i < L; ++i) weights(bh, i, j) = pt[(j - live[bh].begin) * ld + i];
    }
    if (this->has_grad()) {
        dscores.resize(shape), dweights.resize(shape);
        const T* dO = this->grad_storage()->data();
        for (std::size_t bh = 0; bh < heads(); ++bh) {
            const std::size_t b = bh / ql.heads, h = bh % ql.heads;
            blas::gemm(blas::Op::none, blas::Op::trans, L, S, D, T(1), dO + out.at(b, h), out.seq_stride, head_of(v, bh),
                       vl.seq_stride, T(0), dweights.data() + bh * L * S, S);
        }
        xgrad::detail::softmax_backward_rows(weights.data(), dweights.data(), dscores.data(), S, 0, heads() * L, 0, S, T(1));
    }
    const ArrayView no_grad{this->view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", this->view_of(scores),
      this->has_grad() ? this->view_of(dscores) : no_grad);
    f("weights", "softmax(scores), P", this->view_of(weights), this->has_grad() ? this->view_of(dweights) : no_grad);
}

}  // namespace xgrad::nn::detail
