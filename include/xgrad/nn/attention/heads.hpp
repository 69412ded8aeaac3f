// Where the heads of an attention operand live: a head of a token is D = E/H consecutive columns
// of a (L, B, C) or (B, L, C) tensor (C may be 3E: the packed q|k|v of one in-projection GEMM), so
// the attention paths read and write heads in place: no split_heads, merge_heads or transpose.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/parallel.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad::nn::detail {

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

}  // namespace xgrad::nn::detail
