// MultiheadAttention's attention as ONE tape op, for calls whose weights stay inside (need_weights
// false, no dropout): O_bh (L, D) = softmax(scale · Q_bh · K_bhᵀ + masks) · V_bh for every head,
// forward and backward each in one pass per (batch, head) over head-local buffers. The heads are
// read and written in place (HeadLayout), as by the two ops of weights_context.hpp, which the
// call uses when the weights leave it.
//
// The scores are kept TRANSPOSED, keys × queries, so that the queries are the SIMD lanes:
//   - the softmax over keys runs down columns: max and sum are elementwise, never across lanes;
//   - the partial vector is the queries' last one, and the live keys (kernels::KeyRange) are
//     whole rows, however many;
//   - every product reads its broadcast operand in place and its vector operand by contiguous
//     rows; only Q (forward) and dO (backward) are transposed, once per head.
// Keys outside a head's live range are skipped as in weights_context.hpp: their weights are 0,
// their keys and values are not read, and their rows of dK and dV not written.
//
// Here too, what every one-op path shares (weights_context.hpp and memory_efficient.hpp include
// this file): where the heads of an operand live (HeadLayout: a head of a token is D = E/H
// consecutive columns of a (L, B, C) or (B, L, C) tensor, C may be 3E, the packed q|k|v of one
// in-projection GEMM, so the paths read and write heads in place: no split_heads, merge_heads or
// transpose), and what the nodes show inside without keeping it, for tape listings (`xgrad
// inspect`, inspect/tape_graph.hpp): recomputed on request by each node's for_each_internal from
// its inputs, value and gradient, as the two-op path would have them.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/parallel.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/kernels/attention_scores.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/gemm_tiled.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"

namespace xgrad::nn::detail {

// ---- the heads of the operands ----

// Where the heads of one operand live in a rank-3 tensor: (len, batch, C) when sequence first,
// (batch, len, C) when batch first; head h of token (l, b) is columns [offset + h·D, +D) of row
// l·seq_stride + b·batch_stride.
//
// Grouped-query attention: the key and value operands have fewer heads than the query, each
// serving `group` consecutive query heads (query head h reads key/value head h / group). Their
// layouts keep their own head count and say the group; the attention paths index every operand by
// query head bh (at(bh)), so they read a shared head in place and never repeat it in memory.
struct HeadLayout {
    std::size_t batch = 0, len = 0, heads = 0, head_dim = 0;
    std::size_t seq_stride = 0, batch_stride = 0, offset = 0;
    std::size_t group = 1;  // query heads per head of this operand: 1 but for grouped keys and values

    static HeadLayout of(const std::array<std::size_t, 3>& shape, bool batch_first, std::size_t heads,
                         std::size_t head_dim, std::size_t offset) {
        const std::size_t C = shape[2];
        HeadLayout h;
        h.batch = batch_first ? shape[0] : shape[1];
        h.len = batch_first ? shape[1] : shape[0];
        h.heads = heads, h.head_dim = head_dim, h.offset = offset;
        h.seq_stride = batch_first ? C : h.batch * C;
        h.batch_stride = batch_first ? h.len * C : C;
        return h;
    }
    // The first element of head h of sequence b; rows follow at seq_stride.
    std::size_t at(std::size_t b, std::size_t h) const { return b * batch_stride + offset + h * head_dim; }
    // The same for QUERY head bh = b·H + h, the order of the scores (B·H, L, S): head h / group of
    // sequence b.
    std::size_t at(std::size_t bh) const {
        const std::size_t own = bh / group;  // b·heads + h / group, as heads = H / group
        return at(own / heads, own % heads);
    }
    // Query heads this operand serves in all, B·H.
    std::size_t query_heads() const { return batch * heads * group; }
};

// One operand of the attention: a projection and where its heads are.
template <Real T>
struct HeadOperand {
    Var<T, 3> source;
    HeadLayout layout;
    // The first element of head bh's (len, head_dim) block; rows follow at layout.seq_stride.
    const T* head(std::size_t bh) const { return source.value().data() + layout.at(bh); }
};
// As an op's input (make_op, OpNode), a head operand is its source.
template <Real T>
bool input_requires_grad(const HeadOperand<T>& x) {
    return xgrad::input_requires_grad(x.source);
}
template <Real T>
void release_input(HeadOperand<T>& x) {
    x.source = {};
}
template <Real T>
void visit_input(const Node::InputVisitor& f, const HeadOperand<T>& x) {
    xgrad::visit_input(f, x.source);
}

// How a caller's masks reach an attention: fill(ScoreMasks&) merges them into the masks of the scores
// (reset to the scores' shape first). A reference to the caller's callable, not a copy, called
// before the attention returns; one type for every caller, so that every path is compiled once for
// each element type (libxgrad's lists in paths.hpp), whatever masks the caller has.
template <Real T>
class MaskFiller {
public:
    template <class Fill>
        requires(!std::same_as<Fill, MaskFiller> && std::invocable<const Fill&, kernels::ScoreMasks<T>&>)
    MaskFiller(const Fill& fill)  // NOLINT(google-explicit-constructor): a lambda is passed as it is
        : fill_(&fill), call_([](const void* f, kernels::ScoreMasks<T>& masks) { (*static_cast<const Fill*>(f))(masks); }) {}
    void operator()(kernels::ScoreMasks<T>& masks) const { call_(fill_, masks); }

private:
    const void* fill_;
    void (*call_)(const void*, kernels::ScoreMasks<T>&);
};
// The parameter type of the paths: not deduced, so that T comes from the operands and a lambda converts.
template <Real T>
using MaskFillerOf = std::type_identity_t<MaskFiller<T>>;

// The gradient buffers of a one-op attention's inputs (null: not needed), for its backward.
template <Real T>
struct HeadGrads {
    T *q = nullptr, *k = nullptr, *v = nullptr;

    static HeadGrads of(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v) {
        const auto buffer = [](const HeadOperand<T>& x) {
            return x.source.requires_grad() ? x.source.node()->grad_buffer().data() : nullptr;
        };
        return {buffer(q), buffer(k), buffer(v)};
    }
    bool any() const { return q || k || v; }
};

// q, k and v must serve the same query heads (B·H) with heads of one size, k and v grouped alike;
// `op` names the caller in the error.
inline void check_head_operands(const HeadLayout& q, const HeadLayout& k, const HeadLayout& v, const char* op) {
    const auto describe = [](const char* name, const HeadLayout& l) {
        std::string s = std::string(name) + " " + std::to_string(l.batch) + " x " + std::to_string(l.heads) +
                        " heads of " + std::to_string(l.head_dim);
        if (l.group > 1) s += ", each serving " + std::to_string(l.group) + " query heads";
        return s;
    };
    const bool same_heads = q.group == 1 && k.query_heads() == q.query_heads() && v.query_heads() == q.query_heads();
    if (!same_heads || k.group != v.group || k.head_dim != q.head_dim || v.head_dim != q.head_dim)
        throw shape_error(std::string(op) + ": the heads do not match: " + describe("query", q) + "; " +
                          describe("key", k) + "; " + describe("value", v));
}

// body(bh) for every query head bh of `heads` (B·H), split over xgrad's threads by whole groups
// (`group` query heads share a key/value head): the backwards add each head's dK and dV from one
// thread, in the order of bh, whatever the number of threads.
template <class Body>
void for_each_query_head(std::size_t heads, std::size_t group, double flops, const Body& body) {
    parallel_for(heads / group, flops, [&](std::size_t first, std::size_t last) {
        for (std::size_t bh = first * group; bh < last * group; ++bh) body(bh);
    });
}

// ---- what the one-op paths show inside (nothing here runs in a forward or a backward) ----

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

// ---- the fused attention ----

// O (L, B, E) or (B, L, E) = the attention of query heads q over key heads k and value heads v.
template <Real T>
class FusedAttentionNode final : public OpNode<FusedAttentionNode<T>, T, 3> {
public:
    HeadOperand<T> q, k, v;
    HeadLayout out;
    T scale = 1;
    kernels::ScoreMasks<T> masks;
    std::vector<kernels::KeyRange> live;  // per (b, h): the keys some query keeps (masks.live_keys)
    std::vector<T> probs_t;               // per (b, h): Pᵀ, rows [0, S') of (S, ld) used; kept for backward

    const char* op_name() const override { return "attention"; }
    auto inputs() { return std::tie(q, k, v); }

    std::size_t heads() const { return q.layout.batch * q.layout.heads; }
    // Row length of the transposed buffers: L rounded up to whole vectors.
    std::size_t ld() const { return (q.layout.len + simd::lanes<T> - 1) / simd::lanes<T> * simd::lanes<T>; }
    // The forward's flops, 4·L·S·D per (batch, head), for parallel_for (the backward: twice)
    double flops() const {
        return 4.0 * double(heads()) * double(q.layout.len) * double(k.layout.len) * double(q.layout.head_dim);
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
        const Grads g = Grads::of(q, k, v);
        if (!g.any()) return;
        // each (b, h) writes only its own head columns of dQ; the query heads sharing a key/value
        // head add into its dK and dV from one thread
        for_each_query_head(heads(), k.layout.group, 2 * flops(), [&](std::size_t bh) { backward_head(bh, g); });
    }

    void for_each_internal(const Node::InternalVisitor& f) const override;  // below

private:
    using Grads = HeadGrads<T>;
    using Plan = kernels::tiled::Plan<T>;

    // Pᵀ of head bh = softmax down the columns of scale · K' Qᵀ + masks; O_bh = P · V'
    void forward_head(std::size_t bh) {
        const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
        const std::size_t L = ql.len, D = ql.head_dim, ld = this->ld();
        const kernels::KeyRange keys = live[bh];
        const std::size_t n = keys.size();  // S'
        T* o = this->value.data() + out.at(bh);
        if (n == 0 || L == 0) {  // every key ignored: O_bh = 0 (or no query)
            for (std::size_t i = 0; i < L; ++i) std::fill_n(o + i * out.seq_stride, D, T(0));
            return;
        }
        thread_local std::vector<T> qt;  // Qᵀ (D, ld)
        if (qt.size() < D * ld) qt.resize(D * ld);
        kernels::tiled::pack_transposed(q.head(bh), ql.seq_stride, D, L, qt.data(), ld);
        T* pt = probs_t_of(bh);
        // Sᵀ (S', L) = scale · K' (S', D) · Qᵀ (D, L) + masks, then Pᵀ = its softmax down the columns
        kernels::scores_columns(k.head(bh) + keys.begin * kl.seq_stride, kl.seq_stride, qt.data(), n, L, D, scale, pt, ld);
        kernels::apply_masks_columns(masks, bh * L, L, keys, pt, ld);
        kernels::softmax_columns(pt, n, ld, ld, kernels::EmptyLine::zeros);
        // O_bh (L, D) = P (L, S') · V' (S', D), P(i, j) = Pᵀ[j·ld + i]
        kernels::tiled::product(Plan{.rows = L, .cols = D, .k = n, .r = pt, .r_row = 1, .r_step = ld, .c = o,
                                     .ldc = out.seq_stride},
                                v.head(bh) + keys.begin * vl.seq_stride, vl.seq_stride);
    }

    // dV' += Pᵀ dO, dSᵀ = the softmax's backward of dPᵀ = V' dOᵀ, dQ += dS K', dK' += dSᵀ Q
    void backward_head(std::size_t bh, const Grads& g) {
        const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
        const std::size_t L = ql.len, D = ql.head_dim, ld = this->ld();
        const kernels::KeyRange keys = live[bh];
        const std::size_t n = keys.size();
        if (n == 0 || L == 0) return;  // O_bh = 0 whatever Q, K and V (or has no row)
        const T* dO = this->grad_buffer().data() + out.at(bh);
        const T* pt = probs_t_of(bh);
        const std::size_t k_first = kl.at(bh) + keys.begin * kl.seq_stride, v_first = vl.at(bh) + keys.begin * vl.seq_stride;
        if (g.v)  // dV' (S', D) += Pᵀ (S', L) · dO_bh (L, D)
            kernels::tiled::product(Plan{.rows = n, .cols = D, .k = L, .r = pt, .r_row = ld, .beta = T(1), .c = g.v + v_first,
                                         .ldc = vl.seq_stride},
                                    dO, out.seq_stride);
        if (!g.q && !g.k) return;
        thread_local std::vector<T> dot, dst;  // dOᵀ (D, ld); dPᵀ then dSᵀ (S', ld)
        if (dot.size() < D * ld) dot.resize(D * ld);
        if (dst.size() < n * ld) dst.resize(n * ld);
        kernels::tiled::pack_transposed(dO, out.seq_stride, D, L, dot.data(), ld);
        // dPᵀ (S', L) = V' (S', D) · dOᵀ (D, L)
        kernels::tiled::product(Plan{.rows = n, .cols = L, .k = D, .r = v.source.value().data() + v_first,
                                     .r_row = vl.seq_stride, .c = dst.data(), .ldc = ld},
                                dot.data(), ld);
        // dSᵀ (S', L) = scale · Pᵀ ⊙ (dPᵀ − Σ_j dPᵀ ⊙ Pᵀ): the softmax's and the scale's backward
        kernels::softmax_backward_columns(pt, dst.data(), dst.data(), n, ld, ld, scale);
        if (g.q)  // dQ_bh (L, D) += dS (L, S') · K' (S', D), dS(i, j) = dSᵀ[j·ld + i]
            kernels::tiled::product(Plan{.rows = L, .cols = D, .k = n, .r = dst.data(), .r_row = 1, .r_step = ld,
                                         .beta = T(1), .c = g.q + ql.at(bh), .ldc = ql.seq_stride},
                                    k.source.value().data() + k_first, kl.seq_stride);
        if (g.k)  // dK' (S', D) += dSᵀ (S', L) · Q_bh (L, D)
            kernels::tiled::product(Plan{.rows = n, .cols = D, .k = L, .r = dst.data(), .r_row = ld, .beta = T(1),
                                         .c = g.k + k_first, .ldc = kl.seq_stride},
                                    q.head(bh), ql.seq_stride);
    }
};

// O in the layout `out` (E = H·D contiguous columns, shape out_shape) for query, key and value
// heads; fill_masks(ScoreMasks&) merges the masks into the node's buffers (reset to the scores' shape).
template <Real T>
Var<T, 3> fused_attention(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v, T scale,
                          MaskFillerOf<T> fill_masks, const HeadLayout& out, const std::array<std::size_t, 3>& out_shape) {
    check_head_operands(q.layout, k.layout, v.layout, "attention");
    return make_op<FusedAttentionNode<T>>(out_shape, [&](auto& node) {
        node.out = out, node.scale = scale;
        node.masks.reset(std::array<std::size_t, 3>{q.layout.batch * q.layout.heads, q.layout.len, k.layout.len});
        fill_masks(node.masks);
        node.forward();
    }, q, k, v);
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
    visit_attention_internals(f, *this, v, out, attention_scores(q, k, scale, masks), weights,
                              this->has_grad() ? this->grad_storage()->data() : nullptr);
}

}  // namespace xgrad::nn::detail
