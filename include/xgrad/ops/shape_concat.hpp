// concat (torch.cat): joins tensors of equal rank along one axis; all other dims must match.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/ops/axis.hpp"

namespace xgrad {
namespace detail {

// Inputs X_i (outer, A_i, inner) side by side along the middle axis: y (outer, Σ A_i, inner).
template <Real T, std::size_t N>
class ConcatNode final : public OpNode<ConcatNode<T, N>, T, N> {
public:
    std::vector<Var<T, N>> xs;         // held only when this node requires grad
    std::vector<std::size_t> extents;  // A_i, each input's extent along the axis
    std::size_t axis = 0;

    const char* op_name() const override { return "concat"; }
    auto inputs() { return std::tie(xs); }

    // Calls block(i, outer_index, offset_in_y, count) for each contiguous block x_i contributes.
    template <class Block>
    void for_each_block(Block&& block) const {
        const AxisSplit ys = split_at(this->value.shape(), axis);
        for (std::size_t o = 0; o < ys.outer; ++o) {
            std::size_t offset = o * ys.extent * ys.inner;
            for (std::size_t i = 0; i < extents.size(); ++i) {
                const std::size_t count = extents[i] * ys.inner;
                block(i, o, offset, count);
                offset += count;
            }
        }
    }

    void forward() {
        T* y = this->value.data();
        for_each_block([&](std::size_t i, std::size_t o, std::size_t offset, std::size_t count) {
            std::copy_n(xs[i].value().data() + o * count, count, y + offset);
        });
    }

    void backward() override {
        // dX_i (outer, A_i, inner) += dY (outer, Σ A, inner)[:, a_i : a_i + A_i, :]
        const T* gy = this->grad_buffer().data();
        std::vector<T*> gx(xs.size(), nullptr);
        for (std::size_t i = 0; i < xs.size(); ++i)
            if (xs[i].requires_grad()) gx[i] = xs[i].node()->grad_buffer().data();
        for_each_block([&](std::size_t i, std::size_t o, std::size_t offset, std::size_t count) {
            if (!gx[i]) return;
            T* g = gx[i] + o * count;
            for (std::size_t k = 0; k < count; ++k) g[k] += gy[offset + k];
        });
    }
};

}  // namespace detail

// torch.cat(xs, axis): every input has the same rank and the same dims except along `axis`.
template <Real T, std::size_t N>
Var<T, N> concat(const std::vector<Var<T, N>>& xs, long axis) {
    static_assert(N >= 1, "xgrad: concat needs rank >= 1");
    if (xs.empty()) throw value_error("concat: needs at least one input");
    for (std::size_t i = 0; i < xs.size(); ++i)  // the operand's name is built only on failure
        if (!xs[i]) require_var(xs[i], "concat", ("input " + std::to_string(i)).c_str());
    const std::size_t ax = detail::resolve_axis(axis, xs[0].shape(), "concat", "input 0");
    std::array<std::size_t, N> shape;
    std::copy(xs[0].shape().begin(), xs[0].shape().end(), shape.begin());
    shape[ax] = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
        for (std::size_t k = 0; k < N; ++k)
            if (k != ax && xs[i].shape(k) != xs[0].shape(k))
                throw shape_error("concat: input " + std::to_string(i) + " has shape " + shape_str(xs[i].shape()) +
                                  " but input 0 has shape " + shape_str(xs[0].shape()) +
                                  "; all dims except axis " + std::to_string(ax) + " must match");
        shape[ax] += xs[i].shape(ax);
    }
    return make_op<detail::ConcatNode<T, N>>(shape, [&](auto& node) {
        node.extents.resize(xs.size());
        for (std::size_t i = 0; i < xs.size(); ++i) node.extents[i] = xs[i].shape(ax);
        node.axis = ax;
        node.forward();
    }, xs);
}
// concat({a, b, c}, axis)
template <Real T, std::size_t N>
Var<T, N> concat(std::initializer_list<Var<T, N>> xs, long axis) {
    return concat(std::vector<Var<T, N>>(xs), axis);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_CONCAT_COMPILED(EXTERN, T, N) \
    EXTERN template Var<T, N> concat<T, N>(const std::vector<Var<T, N>>&, long);
#define XGRAD_DETAIL_CONCATS_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_CONCAT_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_CONCATS_COMPILED)
#undef XGRAD_DETAIL_CONCATS_COMPILED
#undef XGRAD_DETAIL_CONCAT_COMPILED
}  // namespace xgrad
