// The one mechanism behind reshape, permute, transpose, split/merge heads, slice and expand:
// a strided gather (one flat copy when it reads every element in place). Output
// element number f (row-major over the walk's extents) is read from input element
// offset + Σ_k index_k · stride_k. Its exact adjoint scatters with += through the same map, so a
// zero stride (expand) sums the gradient of every repeat.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"

namespace xgrad {
namespace detail {

// Row-major strides of a contiguous tensor (at most max_loop_rank axes).
template <class S>
std::array<std::size_t, max_loop_rank> contiguous_strides(const S& shape) {
    if (shape.size() > max_loop_rank)
        throw value_error("shape ops: rank " + std::to_string(shape.size()) + " of shape " + shape_str(shape) +
                          " is above the supported 16");
    std::array<std::size_t, max_loop_rank> s{};
    std::size_t stride = 1;
    for (std::size_t k = shape.size(); k-- > 0;) s[k] = stride, stride *= shape[k];
    return s;
}

// Product of the extents, or false when the product of the nonzero extents times 16 bytes does not
// fit in ptrdiff_t: xtensor's signed strides must not overflow, even for an empty tensor (as numpy).
template <class S>
bool checked_numel(const S& shape, std::size_t& out) {
    std::size_t nonzero = 16;
    bool overflow = false, empty = false;
    for (std::size_t d : shape) {
        if (d == 0) empty = true;
        else overflow |= __builtin_mul_overflow(nonzero, d, &nonzero);
    }
    overflow |= nonzero > std::size_t(PTRDIFF_MAX);
    out = empty ? 0 : nonzero / 16;
    return !overflow;
}

// Where each output element is read from (see the header comment).
struct StridedMap {
    std::size_t rank = 0;
    std::size_t offset = 0;
    std::array<std::size_t, max_loop_rank> extent{}, stride{};

    void push(std::size_t e, std::size_t s) {
        if (rank == max_loop_rank) throw value_error("shape ops: rank above 16 is not supported");
        extent[rank] = e, stride[rank] = s, ++rank;
    }
    std::size_t size() const {
        std::size_t n = 1;
        for (std::size_t k = 0; k < rank; ++k) n *= extent[k];
        return n;
    }
    // The walk (core/expr_loop.hpp): operand 0 the output (row-major), operand 1 the input.
    LoopPlan<2> walk() const {
        LoopPlan<2> plan;
        plan.rank = rank;
        std::size_t out_stride = 1;
        for (std::size_t k = rank; k-- > 0;) {
            plan.extent[k] = extent[k], plan.size *= extent[k];
            plan.stride[0][k] = out_stride, plan.stride[1][k] = stride[k];
            out_stride *= extent[k];
        }
        merge_axes(plan);
        return plan;
    }
};

// dst[f] = src[walk(f)] for every output element f, row-major (src already at the map's offset).
// Whatever the ranks: libxgrad holds both element types (XGRAD_COMPILED_IN below).
template <Real T>
void gather_values(const LoopPlan<2>& walk, const T* src, T* dst) {
    if (walk.size == 0) return;
    const std::size_t n = walk.extent[walk.rank - 1], s = walk.stride[1][walk.rank - 1];
    for_each_row(walk, [&](const std::array<std::size_t, 2>& at) {
        if (s == 1) std::copy_n(src + at[1], n, dst + at[0]);
        else
            for (std::size_t k = 0; k < n; ++k) dst[at[0] + k] = src[at[1] + k * s];
    });
}
// Its adjoint: dX (x's shape)[walk(f)] += dY (y's shape)[f]; elements read twice (stride 0) sum.
template <Real T>
void scatter_add(const LoopPlan<2>& walk, const T* gy, T* gx) {
    if (walk.size == 0) return;
    const std::size_t n = walk.extent[walk.rank - 1], s = walk.stride[1][walk.rank - 1];
    for_each_row(walk, [&](const std::array<std::size_t, 2>& at) {
        if (s == 0) {
            T acc = 0;
            for (std::size_t k = 0; k < n; ++k) acc += gy[at[0] + k];
            gx[at[1]] += acc;
        } else {
            for (std::size_t k = 0; k < n; ++k) gx[at[1] + k * s] += gy[at[0] + k];
        }
    });
}

// y (shape M) = x (shape N) gathered through `map`; op_name is the user-facing op.
template <Real T, std::size_t N, std::size_t M>
class GatherNode final : public OpNode<GatherNode<T, N, M>, T, M> {
public:
    Var<T, N> x;  // held only when this node requires grad
    LoopPlan<2> walk;  // the map's, merged once at recording
    std::size_t offset = 0;
    const char* name = "view";

    const char* op_name() const override { return name; }
    auto inputs() { return std::tie(x); }

    void forward() { gather_values(walk, x.value().data() + offset, this->value.data()); }
    void backward() override {
        if (x.requires_grad()) scatter_add(walk, this->grad_buffer().data(), x.node()->grad_buffer().data() + offset);
    }
};

// dst[0, n) = src[0, n), split over the threads.
template <Real T>
void flat_copy(const T* src, std::size_t n, T* dst) {
    parallel_for(n, 8.0 * double(n), [&](std::size_t begin, std::size_t end) { std::copy(src + begin, src + end, dst + begin); });
}
// The backward of y = x element for element (any shapes of one size): dX += dY in one pass, or
// none: in a backward that gives gradients back, dY's buffer becomes dX when nothing else has
// reached x yet.
template <Real T, std::size_t N, std::size_t M>
void flat_copy_backward(TensorNode<T, M>& y, const Var<T, N>& x) {
    if (!x.requires_grad() || y.pass_grad_buffer(*x.node())) return;
    const T* gy = y.grad_buffer().data();
    const auto [gx, beta] = x.node()->grad_target();
    const std::size_t n = y.value.size();
    if (beta == T(0)) std::copy_n(gy, n, gx);
    else
        for (std::size_t i = 0; i < n; ++i) gx[i] += gy[i];
}

// y (shape M) = x (shape N) element for element: a gather whose map is the identity (every
// reshape; a permute, transpose or expand that moves or adds only axes of extent 1; a full slice).
// One flat copy forward; dX += dY backward (detail::flat_copy_backward).
template <Real T, std::size_t N, std::size_t M>
class FlatCopyNode final : public OpNode<FlatCopyNode<T, N, M>, T, M> {
public:
    Var<T, N> x;  // held only when this node requires grad
    const char* name = "view";

    const char* op_name() const override { return name; }
    auto inputs() { return std::tie(x); }

    void forward(const Var<T, N>& input) { detail::flat_copy(input.value().data(), this->value.size(), this->value.data()); }
    void backward() override { detail::flat_copy_backward(*this, x); }
};

// Does `walk` read output element f from input element f, for an input of `count` elements?
inline bool is_identity(const LoopPlan<2>& walk, std::size_t offset, std::size_t count) {
    return offset == 0 && walk.size == count && (count <= 1 || (walk.rank == 1 && walk.stride[1][0] == 1));
}

// Records y = x gathered through `map` with output shape `out_shape` (its size must be map.size()):
// one flat copy when the map is the identity, the strided gather otherwise.
template <std::size_t M, Real T, std::size_t N, class Shape>
Var<T, M> gather(const Var<T, N>& x, const Shape& out_shape, StridedMap map, const char* name) {
    std::array<std::size_t, M> shape;
    std::copy(out_shape.begin(), out_shape.end(), shape.begin());
    const LoopPlan<2> walk = map.walk();
    if (is_identity(walk, map.offset, x.size()))
        return make_op<FlatCopyNode<T, N, M>>(shape, [&](auto& node) {
            node.name = name;
            node.forward(x);
        }, x);
    return make_op<GatherNode<T, N, M>>(shape, [&](auto& node) {
        node.walk = walk;
        node.offset = map.offset;
        node.name = name;
        node.forward();
    }, x);
}

// The map that walks x's axes in the order `order` (a permutation of 0..N-1).
template <class S, class O>
StridedMap permuted_map(const S& shape, const O& order) {
    const auto strides = contiguous_strides(shape);
    StridedMap m;
    for (std::size_t k = 0; k < order.size(); ++k) m.push(shape[order[k]], strides[order[k]]);
    return m;
}

// Attention heads, d2l's transpose_qkv: x (B, T, H·D) walked as (B, H, T, D).
inline StridedMap split_heads_map(std::size_t B, std::size_t T_, std::size_t H, std::size_t D) {
    StridedMap m;
    m.push(B, T_ * H * D), m.push(H, D), m.push(T_, H * D), m.push(D, 1);
    return m;
}
// d2l's transpose_output: x (B, H, T, D) (or (B·H, T, D)) walked as (B, T, H, D).
inline StridedMap merge_heads_map(std::size_t B, std::size_t H, std::size_t T_, std::size_t D) {
    StridedMap m;
    m.push(B, H * T_ * D), m.push(T_, D), m.push(H, T_ * D), m.push(D, 1);
    return m;
}

}  // namespace detail
}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the loops, and the recording of every
// shape op (both nodes) from rank N to rank M, 1 to 4 each.
namespace xgrad {
#define XGRAD_DETAIL_GATHER_COMPILED(EXTERN, T, N, M)                                                         \
    EXTERN template Var<T, M> detail::gather<M, T, N, std::array<std::size_t, M>>(                              \
        const Var<T, N>&, const std::array<std::size_t, M>&, detail::StridedMap, const char*);
#define XGRAD_DETAIL_GATHERS_FROM_COMPILED(EXTERN, T, N)                                                      \
    XGRAD_DETAIL_GATHER_COMPILED(EXTERN, T, N, 1) XGRAD_DETAIL_GATHER_COMPILED(EXTERN, T, N, 2)                \
    XGRAD_DETAIL_GATHER_COMPILED(EXTERN, T, N, 3) XGRAD_DETAIL_GATHER_COMPILED(EXTERN, T, N, 4)
#define XGRAD_DETAIL_SHAPE_VIEW_COMPILED(EXTERN, T)                                                  \
    EXTERN template void detail::gather_values<T>(const detail::LoopPlan<2>&, const T*, T*);         \
    EXTERN template void detail::scatter_add<T>(const detail::LoopPlan<2>&, const T*, T*);           \
    XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_GATHERS_FROM_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_SHAPE_VIEW_COMPILED)
#undef XGRAD_DETAIL_SHAPE_VIEW_COMPILED
#undef XGRAD_DETAIL_GATHERS_FROM_COMPILED
#undef XGRAD_DETAIL_GATHER_COMPILED
}  // namespace xgrad
