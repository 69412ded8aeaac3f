// Attention in O(L) memory, for long sequences: O_bh (L, D) = softmax(scale · Q_bh · K_bhᵀ + masks) · V_bh
// as ONE tape op that keeps nothing of size L × S. The queries of a head are processed in blocks of
// `block_rows`; a block's scores (rows, S') live only in a per-thread buffer (at most 2 MB) while
// its softmax and its product with V are taken, and the backward computes them again, block by
// block, from Q, K, V and the masks (flash attention's recomputation). Saved state: none beyond the
// inputs and the output.
//
// Unlike flash attention, a block spans every live key at once, so its softmax is the plain one
// (kernels::softmax_rows, the weights path's kernel) and needs no running max or rescaling: the
// output is that of the weights path to rounding of the products. The price is a buffer that grows
// with S (block_rows · S' values per thread, two in backward); the block shrinks as S grows, to
// 32 rows (block_rows_for), past which the buffer grows with S.
//
// Each block reads only its live keys (ScoreMasks::live_keys over the block's queries): under a
// causal mask block [i0, i1) reads keys [0, i1), so about half the scores of the triangle are
// never computed; keys every query ignores (padding) are skipped as on the other paths. Products
// go through kernels::gemm, so the back end choice and Autocast(bfloat16) apply.
//
//   forward, per block:  S = scale · Q_blk K'ᵀ + masks;  P = softmax(S);  O_blk = P V'
//   backward, per block: P again;  dV' += Pᵀ dO_blk;  dP = dO_blk V'ᵀ;  dS = scale · P ⊙ (dP − Σ_j dP ⊙ P);
//                        dQ_blk += dS K';  dK' += dSᵀ Q_blk
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <vector>

#include "xgrad/core/parallel.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/kernels/attention_scores.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/nn/attention/fused.hpp"

namespace xgrad::nn::detail {

// Query rows per block for S keys: a block's scores at most 2 MB, and 32 to 128 rows. Every block
// adds a rank-`rows` product into dK and dV (S', D), so fewer rows cost passes over them (MHA at
// L = 4096 on Zen 4: 16 rows 3.08 s, 64 rows 2.75 s, 128 rows 2.54 s a step); more rows skip less
// of a causal triangle (a block computes its last query's keys).
template <Real T>
std::size_t block_rows_for(std::size_t S) {
    constexpr std::size_t budget = std::size_t(1) << 21;
    return std::clamp<std::size_t>(budget / (std::max<std::size_t>(S, 1) * sizeof(T)), 32, 128);
}

// O (L, B, E) or (B, L, E) = the attention of query heads q over key heads k and value heads v.
template <Real T>
class MemoryEfficientAttentionNode final : public OpNode<MemoryEfficientAttentionNode<T>, T, 3> {
public:
    HeadOperand<T> q, k, v;
    HeadLayout out;
    T scale = 1;
    std::size_t block_rows = 0;
    kernels::ScoreMasks<T> masks;

    const char* op_name() const override { return "attention"; }
    auto inputs() { return std::tie(q, k, v); }

    std::size_t heads() const { return q.layout.batch * q.layout.heads; }
    std::size_t blocks() const { return (q.layout.len + block_rows - 1) / block_rows; }
    // 4·L·S·D per (batch, head) at most (a causal mask halves it), for parallel_for
    double flops() const {
        return 4.0 * double(heads()) * double(q.layout.len) * double(k.layout.len) * double(q.layout.head_dim);
    }

    // Blocks are independent in the forward: (head, block) pairs are shared among the threads.
    void forward() {
        parallel_for(heads() * blocks(), flops(), [&](std::size_t first, std::size_t last) {
            for (std::size_t item = first; item < last; ++item) forward_block(item / blocks(), item % blocks());
        });
    }

    // The blocks of a head add to the same rows of dK and dV (and so do the query heads sharing a
    // key/value head): they run on one thread.
    void backward() override {
        const Grads g = Grads::of(q, k, v);
        if (!g.any()) return;
        for_each_query_head(heads(), k.layout.group, 2 * flops(), [&](std::size_t bh) {
            for (std::size_t b = 0; b < blocks(); ++b) backward_block(bh, b, g);
        });
    }

    void for_each_internal(const Node::InternalVisitor& f) const override;  // below

private:
    using Grads = HeadGrads<T>;
    // One block of queries of head bh: rows [i0, i0 + rows) and the keys they keep.
    struct Block {
        std::size_t i0, rows;
        kernels::KeyRange keys;
    };
    Block block(std::size_t bh, std::size_t b) const {
        const std::size_t i0 = b * block_rows, rows = std::min(block_rows, q.layout.len - i0);
        return {i0, rows, masks.live_keys(bh * q.layout.len + i0, rows)};
    }
    // P (rows, S') of block `blk` of head bh into p (rows ld apart): the softmax of its scores.
    void weights(std::size_t bh, const Block& blk, T* p, std::size_t ld) const {
        const HeadLayout &ql = q.layout, &kl = k.layout;
        kernels::scores_rows(q.head(bh) + blk.i0 * ql.seq_stride, ql.seq_stride, k.head(bh) + blk.keys.begin * kl.seq_stride,
                             kl.seq_stride, blk.rows, blk.keys.size(), ql.head_dim, scale, p, ld);
        kernels::softmax_rows(p, blk.rows, blk.keys.size(), ld, kernels::EmptyLine::zeros,
                              kernels::RowMasks<T>{masks, bh * ql.len + blk.i0, blk.keys});
    }
    static std::vector<T>& scratch(std::vector<T>& buffer, std::size_t size) {
        if (buffer.size() < size) buffer.resize(size);
        return buffer;
    }

    void forward_block(std::size_t bh, std::size_t b) {
        using kernels::Op;
        const Block blk = block(bh, b);
        const std::size_t D = q.layout.head_dim, n = blk.keys.size();
        T* o = this->value.data() + out.at(bh) + blk.i0 * out.seq_stride;
        if (n == 0) {  // every key ignored: these rows of O are 0
            for (std::size_t i = 0; i < blk.rows; ++i) std::fill_n(o + i * out.seq_stride, D, T(0));
            return;
        }
        thread_local std::vector<T> p_buffer;
        T* p = scratch(p_buffer, blk.rows * n).data();
        weights(bh, blk, p, n);
        // O_blk (rows, D) = P (rows, S') · V' (S', D)
        kernels::gemm(Op::none, Op::none, blk.rows, D, n, T(1), p, n, v.head(bh) + blk.keys.begin * v.layout.seq_stride,
                      v.layout.seq_stride, T(0), o, out.seq_stride);
    }

    void backward_block(std::size_t bh, std::size_t b, const Grads& g) {
        using kernels::Op;
        const Block blk = block(bh, b);
        const HeadLayout &ql = q.layout, &kl = k.layout, &vl = v.layout;
        const std::size_t D = ql.head_dim, n = blk.keys.size();
        if (n == 0) return;  // these rows of O are 0 whatever Q, K and V
        thread_local std::vector<T> p_buffer, dp_buffer;
        T* p = scratch(p_buffer, blk.rows * n).data();
        T* dp = scratch(dp_buffer, blk.rows * n).data();
        weights(bh, blk, p, n);
        const T* dO = this->grad_buffer().data() + out.at(bh) + blk.i0 * out.seq_stride;
        const std::size_t k_first = kl.at(bh) + blk.keys.begin * kl.seq_stride,
                          v_first = vl.at(bh) + blk.keys.begin * vl.seq_stride;
        if (g.v)  // dV' (S', D) += Pᵀ (S', rows) · dO_blk (rows, D)
            kernels::gemm(Op::trans, Op::none, n, D, blk.rows, T(1), p, n, dO, out.seq_stride, T(1), g.v + v_first,
                          vl.seq_stride);
        if (!g.q && !g.k) return;
        // dP (rows, S') = dO_blk (rows, D) · V'ᵀ (D, S'); then dS = scale · P ⊙ (dP − Σ_j dP ⊙ P) in place
        kernels::gemm(Op::none, Op::trans, blk.rows, n, D, T(1), dO, out.seq_stride, v.source.value().data() + v_first,
                      vl.seq_stride, T(0), dp, n);
        kernels::softmax_backward_rows(p, dp, dp, n, 0, blk.rows, 0, n, scale);
        if (g.q)  // dQ_blk (rows, D) += dS (rows, S') · K' (S', D)
            kernels::gemm(Op::none, Op::none, blk.rows, D, n, T(1), dp, n, k.source.value().data() + k_first, kl.seq_stride,
                          T(1), g.q + ql.at(bh) + blk.i0 * ql.seq_stride, ql.seq_stride);
        if (g.k)  // dK' (S', D) += dSᵀ (S', rows) · Q_blk (rows, D)
            kernels::gemm(Op::trans, Op::none, n, D, blk.rows, T(1), dp, n, q.head(bh) + blk.i0 * ql.seq_stride,
                          ql.seq_stride, T(1), g.k + k_first, kl.seq_stride);
    }
};

// O in the layout `out` (E = H·D contiguous columns, shape out_shape) for query, key and value
// heads; fill_masks(ScoreMasks&) merges the masks into the node's buffers (reset to the scores'
// shape). block_rows 0: block_rows_for the keys.
template <Real T>
Var<T, 3> memory_efficient_attention(const HeadOperand<T>& q, const HeadOperand<T>& k, const HeadOperand<T>& v,
                                     T scale, MaskFillerOf<T> fill_masks, const HeadLayout& out,
                                     const std::array<std::size_t, 3>& out_shape, std::size_t block_rows = 0) {
    check_head_operands(q.layout, k.layout, v.layout, "attention");
    return make_op<MemoryEfficientAttentionNode<T>>(out_shape, [&](auto& node) {
        node.out = out, node.scale = scale;
        node.block_rows = block_rows > 0 ? block_rows : block_rows_for<T>(k.layout.len);
        node.masks.reset(std::array<std::size_t, 3>{q.layout.batch * q.layout.heads, q.layout.len, k.layout.len});
        fill_masks(node.masks);
        node.forward();
    }, q, k, v);
}

// The memory-efficient op keeps nothing: its weights are the softmax of the recomputed scores.
template <Real T>
void MemoryEfficientAttentionNode<T>::for_each_internal(const Node::InternalVisitor& f) const {
    if (!q.source || !k.source || !v.source) return;  // inputs released: the tape was cleared
    const xt::xtensor<T, 3> scores = attention_scores(q, k, scale, masks);
    xt::xtensor<T, 3> weights = scores;
    kernels::softmax_rows(weights.data(), weights.size() / k.layout.len, k.layout.len, k.layout.len,
                          kernels::EmptyLine::zeros, kernels::NoMasks<T>{});
    visit_attention_internals(f, *this, v, out, scores, weights, this->has_grad() ? this->grad_storage()->data() : nullptr);
}

}  // namespace xgrad::nn::detail
