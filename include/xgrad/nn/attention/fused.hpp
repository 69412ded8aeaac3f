// MultiheadAttention's attention as ONE tape op, for calls whose weights stay inside (need_weights
// false, no dropout): O_bh (L, D) = softmax(scale · Q_bh · K_bhᵀ + masks) · V_bh for every head,
// forward and backward each in one pass per (batch, head) over head-local buffers. The heads are
// read and written in place (HeadLayout), as by the two ops of weights_context.hpp, which the
// call uses when the weights leave it.
//
// The scores are kept TRANSPOSED, keys × queries, so that the queries are the SIMD lanes:
//   - the softmax over keys runs down columns: max and sum are elementwise, never across lanes;
//   - the partial vector is the queries' last one, and the live keys (ops/score_masks.hpp:
//     KeyRange) are whole rows, however many;
//   - every product reads its broadcast operand in place and its vector operand by contiguous
//     rows; only Q (forward) and dO (backward) are transposed, once per head.
// Keys outside a head's live range are skipped as in weights_context.hpp: their weights are 0,
// their keys and values are not read, and their rows of dK and dV not written.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/parallel.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/nn/attention/weights_context.hpp"
#include "xgrad/ops/gemm_kernel.hpp"

namespace xgrad::nn::detail {

// O (L, B, E) or (B, L, E) = the attention of query heads q over key heads k and value heads v.
template <Real T>
class FusedAttentionNode final : public OpNode<FusedAttentionNode<T>, T, 3> {
public:
    HeadOperand<T> q, k, v;
    HeadLayout out;
    T scale = 1;
    ScoreMasks<T> masks;
    std::vector<KeyRange> live;  // per (b, h): the keys some query keeps (masks.live_keys)
    std::vector<T> probs_t;      // per (b, h): Pᵀ, rows [0, S') of (S, ld) used; kept for backward

    const char* op_name() const override { return "attention"; }
    auto inputs() { return std::tie(q, k, v); }

    std::size_t heads() const { return q.layout.batch * q.layout.heads; }
    // Row length of the transposed buffers: L rounded up to whole vectors.
    std::size_t ld() const { return (q.layout.len + simd::lanes<T> - 1) / simd::lanes<T> * simd::lanes<T>; }
    // The forward's flops, 4·L·S·D per (batch, head), for parallel_for (the backward: twice)
    double flops() const {
        return 4.0 * double(heads()) * double(q.layout.len) * double(k.layout.len) * double(q.layout.head_dim);
    }
    const T* head_of(const HeadOperand<T>& x, std::size_t bh) const {
        return x.source.value().data() + x.layout.at(bh / x.layout.heads, bh % x.layout.heads);
    }
    T* probs_t_of(std::size_t bh) { return probs_t.data() + bh * k.layout.len * ld(); }

    void forward() {
        const std::size_t L = q.layout.len;
        live.resize(heads());
        for (std::size_t bh = 0; bh < heads(); ++bh) live[bh] = masks.live_keys(bh * L, L);
        probs_t.resize(heads() * k.layout.len * ld());
        parallel_for(heads(), flops(), [&](std::size_t first, std::size_t last) {
            for (std::size_t bh = first; bh < last; ++bh) forward_head(bh);
        });
    }

    void backward() override {
        const bool need_q = q.source.requires_grad(), need_k = k.source.requires_grad(),
                   need_v = v.source.requires_grad();
        if (!need_q && !need_k && !need_v) return;
        const Grads g{need_q ? q.source.node()->grad_buffer().data() : nullptr,
                      need_k ? k.source.node()->grad_buffer().data() : nullptr,
                      need_v ? v.source.node()->grad_buffer().data() : nullptr};
        // each (b, h) writes only its own head columns of dQ, dK and dV
        parallel_for(heads(), 2 * flops(), [&](std::size_t first, std::size_t last) {
            for (std::size_t bh = first; bh < last; ++bh) backward_head(bh, g);
        });
    }

    void for_each_internal(const Node::InternalVisitor& f) const override;  // study.hpp

private:
    struct Grads {
        T *q, *k, *v;  // the inputs' gradient buffers (null: not needed)
    };
    using Plan = blas::kernel::Plan<T>;

    // Pᵀ of head bh = softmax down the columns of scale · K' Qᵀ + masks; O_bh = P · V'
    void forward_head(std::size_t bh) {
        const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
        const std::size_t L = ql.len, D = ql.head_dim, ld = this->ld();
        const KeyRange keys = live[bh];
        const std::size_t n = keys.size();  // S'
        T* o = this->value.data() + out.at(bh / ql.heads, bh % ql.heads);
        if (n == 0 || L == 0) {  // every key ignored: O_bh = 0 (or no query)
            for (std::size_t i = 0; i < L; ++i) std::fill_n(o + i * out.seq_stride, D, T(0));
            return;
        }
        thread_local std::vector<T> qt;  // Qᵀ (D, ld)
        if (qt.size() < D * ld) qt.resize(D * ld);
        blas::kernel::pack_transposed(head_of(q, bh), ql.seq_stride, D, L, qt.data(), ld);
        T* pt = probs_t_of(bh);
        const T *k0 = head_of(k, bh) + keys.begin * kl.seq_stride, *v0 = head_of(v, bh) + keys.begin * vl.seq_stride;
        // Sᵀ (S', L) = scale · K' (S', D) · Qᵀ (D, L)
        blas::kernel::product(Plan{n, L, D, k0, kl.seq_stride, 1, scale, T(0), pt, ld, nullptr}, qt.data(), ld);
        apply_masks(bh, keys, pt);
        xgrad::detail::softmax_columns(pt, n, ld, ld, xgrad::detail::EmptyLine::zeros);
        // O_bh (L, D) = P (L, S') · V' (S', D), P(i, j) = Pᵀ[j·ld + i]
        blas::kernel::product(Plan{L, D, n, pt, 1, ld, T(1), T(0), o, out.seq_stride, nullptr}, v0, vl.seq_stride);
    }

    // Sᵀ rows j of the live keys, lanes i: + additive(i, j), then -inf where ignore(i, j); the ignore
    // mask only when it ignores a key inside the range. A mask row serving the head's every query
    // (a key_padding_mask) is a scalar per key row; other masks are read element by element.
    void apply_masks(std::size_t bh, KeyRange keys, T* pt) const {
        const std::size_t L = q.layout.len, ld = this->ld();
        constexpr T neg_inf = -std::numeric_limits<T>::infinity();
        const auto apply = [&](const MaskRows<T>& m, auto combine) {
            if (!m.used) return;
            if (m.group % L == 0) {
                const T* row = m.row(bh * L);
                for (std::size_t j = keys.begin; j < keys.end; ++j) {
                    T* st = pt + (j - keys.begin) * ld;
                    for (std::size_t i = 0; i < L; ++i) st[i] = combine(st[i], row[j]);
                }
            } else {
                for (std::size_t i = 0; i < L; ++i) {
                    const T* row = m.row(bh * L + i);
                    for (std::size_t j = keys.begin; j < keys.end; ++j) {
                        T& s = pt[(j - keys.begin) * ld + i];
                        s = combine(s, row[j]);
                    }
                }
            }
        };
        apply(masks.additive, [](T s, T a) { return s + a; });
        if (keys.holes) apply(masks.ignore, [](T s, T ignored) { return ignored != T(0) ? neg_inf : s; });
    }

    // dV' += Pᵀ dO, dSᵀ = the softmax's backward of dPᵀ = V' dOᵀ, dQ += dS K', dK' += dSᵀ Q
    void backward_head(std::size_t bh, const Grads& g) {
        const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
        const std::size_t L = ql.len, D = ql.head_dim, ld = this->ld();
        const KeyRange keys = live[bh];
        const std::size_t n = keys.size();
        if (n == 0 || L == 0) return;  // O_bh = 0 whatever Q, K and V (or has no row)
        const std::size_t b = bh / ql.heads, h = bh % ql.heads;
        const T* dO = this->grad_buffer().data() + out.at(b, h);
        const T* pt = probs_t_of(bh);
        const std::size_t k_first = kl.at(b, h) + keys.begin * kl.seq_stride, v_first = vl.at(b, h) + keys.begin * vl.seq_stride;
        if (g.v)  // dV' (S', D) += Pᵀ (S', L) · dO_bh (L, D)
            blas::kernel::product(Plan{n, D, L, pt, ld, 1, T(1), T(1), g.v + v_first, vl.seq_stride, nullptr}, dO,
                                  out.seq_stride);
        if (!g.q && !g.k) return;
        thread_local std::vector<T> dot, dst;  // dOᵀ (D, ld); dPᵀ then dSᵀ (S', ld)
        if (dot.size() < D * ld) dot.resize(D * ld);
        if (dst.size() < n * ld) dst.resize(n * ld);
        blas::kernel::pack_transposed(dO, out.seq_stride, D, L, dot.data(), ld);
        // dPᵀ (S', L) = V' (S', D) · dOᵀ (D, L)
        blas::kernel::product(Plan{n, L, D, v.source.value().data() + v_first, vl.seq_stride, 1, T(1), T(0), dst.data(),
                                   ld, nullptr},
                              dot.data(), ld);
        // dSᵀ (S', L) = scale · Pᵀ ⊙ (dPᵀ − Σ_j dPᵀ ⊙ Pᵀ): the softmax's and the scale's backward
        xgrad::detail::softmax_backward_columns(pt, dst.data(), dst.data(), n, ld, ld, scale);
        if (g.q)  // dQ_bh (L, D) += dS (L, S') · K' (S', D), dS(i, j) = dSᵀ[j·ld + i]
            blas::kernel::product(Plan{L, D, n, dst.data(), 1, ld, T(1), T(1), g.q + ql.at(b, h), ql.seq_stride, nullptr},
                                  k.source.value().data() + k_first, kl.seq_stride);
        if (g.k)  // dK' (S', D) += dSᵀ (S', L) · Q_bh (L, D)
            blas::kernel::product(Plan{n, D, L, dst.data(), ld, 1, T(1), T(1), g.k + k_first, kl.seq_stride, nullptr},
                                  head_of(q, bh), ql.seq_stride);
    }
};

// O in the layout `out` (E = H·D contiguous columns, shape out_shape) for query, key and value
// heads; fill_masks(ScoreMasks&) merges the masks into the node's buffers (reset to the scores' shape).
template <Real T, class FillMasks>
Var<T, 3> fused_attention(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v, T scale,
                          FillMasks fill_masks, const HeadLayout& out, const std::array<std::size_t, 3>& out_shape) {
    check_head_operands(q.layout, k.layout, "query and key");
    check_head_operands(k.layout, v.layout, "key and value");
    return make_op<FusedAttentionNode<T>>(out_shape, [&](auto& node) {
        node.out = out, node.scale = scale;
        node.masks.reset(std::array<std::size_t, 3>{q.layout.batch * q.layout.heads, q.layout.len, k.layout.len});
        fill_masks(node.masks);
        node.forward();
    }, q, k, v);
}

}  // namespace xgrad::nn::detail
