// Where the heads of an attention operand live: a head of a token is D = E/H consecutive columns
// of a (L, B, C) or (B, L, C) tensor (C may be 3E: the packed q|k|v of one in-projection GEMM), so
// the attention paths read and write heads in place: no split_heads, merge_heads or transpose.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/var.hpp"

namespace xgrad::nn::detail {

// Where the heads of one operand live in a rank-3 tensor: (len, batch, C) when sequence first,
// (batch, len, C) when batch first; head h of token (l, b) is columns [offset + h·D, +D) of row
// l·seq_stride + b·batch_stride.
struct HeadLayout {
    std::size_t batch = 0, len = 0, heads = 0, head_dim = 0;
    std::size_t seq_stride = 0, batch_stride = 0, offset = 0;

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
    // The same for head bh = b·heads + h, the order of the scores (B·H, L, S).
    std::size_t at(std::size_t bh) const { return at(bh / heads, bh % heads); }
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

// q and k (or k and v) must split into heads of the same batch, count and size.
inline void check_head_operands(const HeadLayout& q, const HeadLayout& k, const char* what) {
    if (q.batch != k.batch || q.heads != k.heads || q.head_dim != k.head_dim)
        throw shape_error(std::string("MultiheadAttention: ") + what + ": heads of different geometry");
}

}  // namespace xgrad::nn::detail
