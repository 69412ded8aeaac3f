// The two tape ops at the heart of MultiheadAttention, working on heads IN PLACE: a head of a
// token is D = E/H consecutive columns of a (L, B, C) or (B, L, C) projection (C may be 3E: the
// packed q|k|v of one in-projection GEMM), so no split_heads, merge_heads or transpose is copied.
//
//   attention_weights: P (B·H, L, S) = masked_softmax(scale · Q_bh · K_bhᵀ)   one node
//   attention_context: O_bh (L, D)   = P_bh · V_bh, written into (L, B, E)   one node
//
// Every (b, h) is one strided GEMM per product (kernels::gemm); the scores are in the rows layout
// (kernels/attention_scores.hpp), and mask and softmax are one pass over them forward and one backward
// (dS = P ⊙ (dP − Σ_j dP ⊙ P)).
//
// Keys that every query of a head ignores (padding: a key_padding_mask, valid_lens) are skipped:
// their weights are exactly 0 and written as such, their scores are not computed, and their keys
// and values are not read, nor their rows of dK and dV written (they are 0). Only dP, the
// weights' own gradient, keeps every column. So a NaN or inf in a padded key or value does not
// reach the output, where PyTorch's would make it NaN.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "xgrad/core/var.hpp"
#include "xgrad/kernels/attention_scores.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/nn/attention/fused.hpp"
#include "xgrad/nn/attention/mha_masks.hpp"

namespace xgrad::nn::detail {

// P (B·H, L, S): attention weights of every head; masks are constants (no gradient).
template <Real T>
class AttentionWeightsNode final : public OpNode<AttentionWeightsNode<T>, T, 3> {
public:
    HeadOperand<T> q, k;
    T scale = 1;
    kernels::ScoreMasks<T> masks;
    std::vector<kernels::KeyRange> live;  // per (b, h): the keys some query keeps (masks.live_keys)
    xt::xtensor<T, 3> dscores;            // backward's scratch, kept across steps

    const char* op_name() const override { return "attention_weights"; }
    auto inputs() { return std::tie(q, k); }

    // out rows [first, last) of (B·H·L, S) = factor · P ⊙ (dP − Σ_j dP ⊙ P) from this node's value P
    // and gradient dP (factor: the scale, for the gradient of Q·Kᵀ), columns `keys` only
    void softmax_backward(T* out, T factor, std::size_t first, std::size_t last, kernels::KeyRange keys) const {
        kernels::softmax_backward_rows(this->value.data(), this->grad_storage()->data(), out, k.layout.len, first, last,
                                       keys.begin, keys.size(), factor);
    }

    // 2·L·S·D flops per (batch, head), for parallel_for
    double flops() const { return 2.0 * double(this->value.size()) * double(q.layout.head_dim); }

    void forward() {
        const std::size_t L = q.layout.len, S = k.layout.len, H = q.layout.heads;
        live.resize(q.layout.batch * H);
        for (std::size_t bh = 0; bh < live.size(); ++bh) live[bh] = masks.live_keys(bh * L, L);
        const HeadLayout &ql = q.layout, &kl = k.layout;
        parallel_for(q.layout.batch * H, flops(), [&](std::size_t first, std::size_t last) {
            for (std::size_t bh = first; bh < last; ++bh) {
                T* P = this->value.data() + bh * L * S;
                const kernels::KeyRange keys = live[bh];
                // P_bh (L, S') = softmax(scale · Q_bh (L, D) · K'_bhᵀ (D, S') + masks) over the live keys
                kernels::scores_rows(q.head(bh), ql.seq_stride, k.head(bh) + keys.begin * kl.seq_stride, kl.seq_stride, L,
                                     keys.size(), ql.head_dim, scale, P + keys.begin, S);
                kernels::softmax_rows(P + keys.begin, L, keys.size(), S, kernels::EmptyLine::zeros,
                                      kernels::RowMasks<T>{masks, bh * L, keys});
                for (std::size_t i = 0; i < L; ++i) {  // the keys the head ignores
                    std::fill(P + i * S, P + i * S + keys.begin, T(0));
                    std::fill(P + i * S + keys.end, P + (i + 1) * S, T(0));
                }
            }
        });
    }

    void for_each_internal(const Node::InternalVisitor& f) const override;  // below

    void backward() override {
        using kernels::Op;
        const bool need_q = q.source.requires_grad(), need_k = k.source.requires_grad();
        if (!need_q && !need_k) return;
        const HeadLayout &ql = q.layout, &kl = k.layout;
        const std::size_t L = ql.len, S = kl.len, D = ql.head_dim;
        if (dscores.shape() != this->value.shape()) dscores.resize(this->value.shape());
        T* gq = need_q ? q.source.node()->grad_buffer().data() : nullptr;
        T* gk = need_k ? k.source.node()->grad_buffer().data() : nullptr;
        // Each (b, h) writes only its own rows of dS and its own head columns of dQ; the query heads
        // sharing a key head add into its dK from one thread.
        for_each_query_head(ql.query_heads(), kl.group, 2 * flops(), [&](std::size_t bh) {
            const kernels::KeyRange keys = live[bh];  // S' = its size: dS is 0 outside it
            const std::size_t key0 = keys.begin * kl.seq_stride;
            // dS_bh (L,S') = P ⊙ (dP − Σ_j dP ⊙ P) · scale   (the softmax's and the scale's backward)
            softmax_backward(dscores.data(), scale, bh * L, (bh + 1) * L, keys);
            const T* ds = dscores.data() + bh * L * S + keys.begin;
            if (gq)  // dQ_bh (L,D) += dS_bh (L,S') · K_bh (S',D)
                kernels::gemm(Op::none, Op::none, L, D, keys.size(), T(1), ds, S, k.head(bh) + key0, kl.seq_stride, T(1),
                              gq + ql.at(bh), ql.seq_stride);
            if (gk)  // dK_bh (S',D) += dS_bhᵀ (S',L) · Q_bh (L,D)
                kernels::gemm(Op::trans, Op::none, keys.size(), D, L, T(1), ds, S, q.head(bh), ql.seq_stride, T(1),
                              gk + kl.at(bh) + key0, kl.seq_stride);
        });
    }
};

// O (L, B, E) or (B, L, E): head h of O_b is P_bh · V_bh, in the layout `out`.
template <Real T>
class AttentionContextNode final : public OpNode<AttentionContextNode<T>, T, 3> {
public:
    Var<T, 3> weights;  // P (B·H, L, S)
    HeadOperand<T> v;
    HeadLayout out;
    std::vector<kernels::KeyRange> live;  // per (b, h): the keys outside which P is 0 (AttentionWeightsNode)

    const char* op_name() const override { return "attention_context"; }
    auto inputs() { return std::tie(weights, v); }

    double flops() const { return 2.0 * double(weights.size()) * double(v.layout.head_dim); }

    void forward() {
        using kernels::Op;
        const HeadLayout& vl = v.layout;
        const std::size_t L = out.len, S = vl.len, D = vl.head_dim;
        const T* P = weights.value().data();
        parallel_for(vl.query_heads(), flops(), [&](std::size_t first, std::size_t last) {
            for (std::size_t bh = first; bh < last; ++bh) {  // O_bh (L,D) = P_bh (L,S') · V_bh (S',D)
                const kernels::KeyRange keys = live[bh];
                kernels::gemm(Op::none, Op::none, L, D, keys.size(), T(1), P + bh * L * S + keys.begin, S,
                              v.head(bh) + keys.begin * vl.seq_stride, vl.seq_stride, T(0), this->value.data() + out.at(bh),
                              out.seq_stride);
            }
        });
    }

    void backward() override {
        using kernels::Op;
        const bool need_p = weights.requires_grad(), need_v = v.source.requires_grad();
        const HeadLayout& vl = v.layout;
        const std::size_t L = out.len, S = vl.len, D = vl.head_dim;
        const T *P = weights.value().data(), *dO = this->grad_buffer().data();
        // every (b, h) writes its whole slice of dP: beta 0 overwrites on first touch in a pass; the
        // query heads sharing a value head add into its dV from one thread
        const auto [dP, beta_p] = need_p ? weights.node()->grad_target() : typename TensorNode<T, 3>::GradTarget{};
        T* gv = need_v ? v.source.node()->grad_buffer().data() : nullptr;
        for_each_query_head(vl.query_heads(), vl.group, 2 * flops(), [&](std::size_t bh) {
            const std::size_t w = bh * L * S;
            if (dP)  // dP_bh (L,S) = dO_bh (L,D) · V_bhᵀ (D,S) + beta · dP_bh
                kernels::gemm(Op::none, Op::trans, L, S, D, T(1), dO + out.at(bh), out.seq_stride, v.head(bh),
                              vl.seq_stride, beta_p, dP + w, S);
            const kernels::KeyRange keys = live[bh];
            if (gv)  // dV_bh (S',D) += P_bhᵀ (S',L) · dO_bh (L,D), 0 outside the keys
                kernels::gemm(Op::trans, Op::none, keys.size(), D, L, T(1), P + w + keys.begin, S, dO + out.at(bh),
                              out.seq_stride, T(1), gv + vl.at(bh) + keys.begin * vl.seq_stride, vl.seq_stride);
        });
    }
};

// P (B·H, L, S) for query heads q and key heads k. fill_masks(ScoreMasks&) merges the masks into
// the node's buffers (reset to the scores' shape).
template <Real T>
Var<T, 3> attention_weights(const HeadOperand<T>& q, const HeadOperand<T>& k, T scale, MaskFillerOf<T> fill_masks) {
    check_head_operands(q.layout, k.layout, k.layout, "attention_weights");
    const std::array<std::size_t, 3> shape{q.layout.batch * q.layout.heads, q.layout.len, k.layout.len};
    return make_op<AttentionWeightsNode<T>>(shape, [&](auto& node) {
        node.scale = scale;
        node.masks.reset(shape);
        fill_masks(node.masks);
        node.forward();
    }, q, k);
}

// The keys each head of P does not wholly ignore; P is a result of attention_weights.
template <Real T>
const std::vector<kernels::KeyRange>& live_keys_of(const Var<T, 3>& weights) {
    return static_cast<const AttentionWeightsNode<T>&>(*weights.node()).live;
}

// O in the layout `out` (E = H·D contiguous columns) from weights P (B·H, L, S) and value heads v;
// P is 0 outside the keys `live` of each head (live_keys_of the weights, which dropout keeps).
template <Real T>
Var<T, 3> attention_context(const Var<T, 3>& weights, const HeadOperand<T>& v, const HeadLayout& out,
                            const std::array<std::size_t, 3>& out_shape, const std::vector<kernels::KeyRange>& live) {
    check_head_operands(out, v.layout, v.layout, "attention_context");
    return make_op<AttentionContextNode<T>>(out_shape, [&](auto& node) {
        node.out = out;
        node.live.assign(live.begin(), live.end());
        node.forward();
    }, weights, v);
}

// The softmax's input, "scores" (B·H, L, S) = scale · Q·Kᵀ + additive mask, -inf where
// ignored, and its gradient dS = P ⊙ (dP − Σ_j dP ⊙ P) once a backward has reached this node.
template <Real T>
void AttentionWeightsNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source) return;  // inputs released: the tape was cleared
    const std::size_t S = k.layout.len;
    const xt::xtensor<T, 3> scores = attention_scores(q, k, scale, masks);
    xt::xtensor<T, 3> grad;
    if (this->has_grad()) {
        grad.resize(this->value.shape());
        softmax_backward(grad.data(), T(1), 0, this->value.size() / S, {0, S});
    }
    const ArrayView no_grad{this->view_of(scores).shape};
    f("scores", "scale·q·kᵀ + mask, the softmax's input", this->view_of(scores),
      this->has_grad() ? this->view_of(grad) : no_grad);
}

}  // namespace xgrad::nn::detail
