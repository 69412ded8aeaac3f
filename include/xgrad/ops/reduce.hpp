// Reductions: sum, mean, max over one axis or over all elements, with or without keepdims.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <limits>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/ops/axis.hpp"

namespace xgrad {

enum class Reduction { sum, mean, max };

namespace detail {

inline const char* reduction_name(Reduction r) {
    return r == Reduction::sum ? "sum" : r == Reduction::mean ? "mean" : "max";
}

// x (outer, extent, inner) -> y (outer, inner); all-reduce is outer = inner = 1.
template <Real T, std::size_t N, std::size_t M>
class ReduceNode final : public OpNode<ReduceNode<T, N, M>, T, M> {
public:
    Var<T, N> x;
    Reduction kind = Reduction::sum;
    AxisSplit split;
    bool all_reduce = false;          // max over every element: ties share the gradient
    std::vector<std::size_t> argmax;  // max: winning index along the axis, per output element

    const char* op_name() const override { return reduction_name(kind); }
    auto inputs() { return std::tie(x); }

    void forward() {
        const T* src = x.value().data();
        T* dst = this->value.data();
        const auto [outer, extent, inner] = split;
        if (kind == Reduction::max) argmax.assign(outer * inner, 0);
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < inner; ++i) {
                const T* p = src + o * extent * inner + i;
                T acc = kind == Reduction::max ? p[0] : T(0);
                std::size_t best = 0;
                for (std::size_t a = 0; a < extent; ++a) {
                    const T v = p[a * inner];
                    if (kind != Reduction::max) acc += v;
                    else if (v > acc || (v != v && acc == acc)) acc = v, best = a;  // NaN wins, as torch
                }
                if (kind == Reduction::mean) acc /= T(extent);
                dst[o * inner + i] = acc;
                if (kind == Reduction::max) argmax[o * inner + i] = best;
            }
    }

    void backward() override {
        if (!x.requires_grad()) return;
        // sum:  dX (outer, A, inner) += dY (outer, 1, inner)
        // mean: dX += dY / A
        // max:  dX[o, argmax, i] += dY[o, i]; an all-reduce max shares dY evenly among ties (as torch)
        const T* gy = this->grad_buffer().data();
        T* gx = x.node()->grad_buffer().data();
        const auto [outer, extent, inner] = split;
        std::size_t ties = 0;
        if (kind == Reduction::max && all_reduce)
            for (std::size_t a = 0; a < extent; ++a) ties += x.value().data()[a] == this->value.data()[0];
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < inner; ++i) {
                const T g = gy[o * inner + i];
                T* p = gx + o * extent * inner + i;
                if (kind == Reduction::max) {
                    if (all_reduce && ties > 1) {
                        for (std::size_t a = 0; a < extent; ++a)
                            if (x.value().data()[a] == this->value.data()[0]) p[a] += g / T(ties);
                    } else {
                        p[argmax[o * inner + i] * inner] += g;
                    }
                } else {
                    const T share = kind == Reduction::mean ? g / T(extent) : g;
                    for (std::size_t a = 0; a < extent; ++a) p[a * inner] += share;
                }
            }
    }
};

template <std::size_t M, Real T, std::size_t N, class Shape>
Var<T, M> reduce(const Var<T, N>& x, Reduction kind, AxisSplit split, const Shape& out_shape, bool all_reduce) {
    if (kind == Reduction::max && split.extent == 0 && split.outer * split.inner > 0)
        throw shape_error("max: cannot reduce over an empty axis of operand of shape " + shape_str(x.shape()));
    std::array<std::size_t, M> shape;
    std::copy(out_shape.begin(), out_shape.end(), shape.begin());
    return make_op<ReduceNode<T, N, M>>(shape, [&](auto& node) {
        node.kind = kind;
        node.split = split;
        node.all_reduce = all_reduce;
        node.forward();
    }, x);
}

template <Real T, std::size_t N>
Var<T, 0> reduce_all(const Var<T, N>& x, Reduction kind) {
    require_var(x, reduction_name(kind), "x");
    return reduce<0>(x, kind, AxisSplit{1, x.size(), 1}, std::array<std::size_t, 0>{}, true);
}
template <Real T, std::size_t N>
Var<T, N> reduce_all_keep(const Var<T, N>& x, Reduction kind) {
    require_var(x, reduction_name(kind), "x");
    std::array<std::size_t, N> ones;
    ones.fill(1);
    return reduce<N>(x, kind, AxisSplit{1, x.size(), 1}, ones, true);
}
template <Real T, std::size_t N>
Var<T, N - 1> reduce_axis(const Var<T, N>& x, long axis, Reduction kind) {
    require_var(x, reduction_name(kind), "x");
    const std::size_t ax = resolve_axis(axis, x.shape(), reduction_name(kind));
    std::array<std::size_t, N - 1> shape;
    for (std::size_t k = 0, j = 0; k < N; ++k)
        if (k != ax) shape[j++] = x.shape()[k];
    return reduce<N - 1>(x, kind, split_at(x.shape(), ax), shape, false);
}
template <Real T, std::size_t N>
Var<T, N> reduce_axis_keep(const Var<T, N>& x, long axis, Reduction kind) {
    require_var(x, reduction_name(kind), "x");
    const std::size_t ax = resolve_axis(axis, x.shape(), reduction_name(kind));
    std::array<std::size_t, N> shape;
    std::copy(x.shape().begin(), x.shape().end(), shape.begin());
    shape[ax] = 1;
    return reduce<N>(x, kind, split_at(x.shape(), ax), shape, false);
}

}  // namespace detail

// sum(x): all elements -> rank 0.  sum(x, axis): rank N-1.  keepdims keeps extent-1 axes.
#define XGRAD_REDUCTION(NAME, KIND)                                                                      \
    template <Real T, std::size_t N>                                                                     \
    Var<T, 0> NAME(const Var<T, N>& x) {                                                                 \
        return detail::reduce_all(x, KIND);                                                              \
    }                                                                                                    \
    template <Real T, std::size_t N>                                                                     \
    Var<T, N> NAME(const Var<T, N>& x, keepdims_t) {                                                     \
        return detail::reduce_all_keep(x, KIND);                                                         \
    }                                                                                                    \
    template <Real T, std::size_t N>                                                                     \
    Var<T, N - 1> NAME(const Var<T, N>& x, long axis) {                                                  \
        static_assert(N >= 1, "xgrad: " #NAME "(x, axis) needs rank >= 1");                              \
        return detail::reduce_axis(x, axis, KIND);                                                       \
    }                                                                                                    \
    template <Real T, std::size_t N>                                                                     \
    Var<T, N> NAME(const Var<T, N>& x, long axis, keepdims_t) {                                          \
        return detail::reduce_axis_keep(x, axis, KIND);                                                  \
    }                                                                                                    \
    template <LazyExpression E, class... Args>                                                           \
    auto NAME(const E& e, Args... args) {                                                                \
        return NAME(eval(e), args...);                                                                   \
    }

XGRAD_REDUCTION(sum, Reduction::sum)
XGRAD_REDUCTION(mean, Reduction::mean)
XGRAD_REDUCTION(max, Reduction::max)
#undef XGRAD_REDUCTION

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_REDUCE_COMPILED(EXTERN, T, N)                                                   \
    EXTERN template Var<T, 0> detail::reduce_all<T, N>(const Var<T, N>&, Reduction);                 \
    EXTERN template Var<T, N> detail::reduce_all_keep<T, N>(const Var<T, N>&, Reduction);            \
    EXTERN template Var<T, N - 1> detail::reduce_axis<T, N>(const Var<T, N>&, long, Reduction);      \
    EXTERN template Var<T, N> detail::reduce_axis_keep<T, N>(const Var<T, N>&, long, Reduction);
#define XGRAD_DETAIL_REDUCES_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_REDUCE_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_REDUCES_COMPILED)
#undef XGRAD_DETAIL_REDUCES_COMPILED
#undef XGRAD_DETAIL_REDUCE_COMPILED
}  // namespace xgrad
