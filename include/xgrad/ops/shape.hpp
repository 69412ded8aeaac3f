// Shape ops: reshape, permute, transpose, attention-head split/merge, slice/narrow, expand, concat.
// Every op but concat is one strided gather (shape_view.hpp): one copy forward, its exact adjoint
// (a scatter-add through the same index map) backward.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <utility>

#include "xgrad/core/compiled.hpp"
#include "xgrad/ops/axis.hpp"
#include "xgrad/ops/shape_concat.hpp"
#include "xgrad/ops/shape_view.hpp"

namespace xgrad {

namespace detail {
inline std::string long_str(long v) { return std::to_string(v); }

// Resolves a reshape target `to` (one -1 allowed) against x's `count` elements into `out`; compiled
// in libxgrad (lib/shapes.cpp), whatever the ranks.
void reshape_target(std::span<const std::size_t> from, std::size_t count, std::span<const long> to,
                    std::span<std::size_t> out);

template <class S>
std::array<std::size_t, 3> heads_shape3(const S& s) {
    return {s[0], s[1], s[2]};
}
}  // namespace detail

// ---- reshape: same elements in row-major order, new shape; one dim may be -1 (inferred) ----
// Y (new shape) = X (old shape) element by element; dX += dY element by element.
template <std::size_t M, Real T, std::size_t N>
Var<T, M> reshape(const Var<T, N>& x, const std::array<long, M>& shape) {
    require_var(x, "reshape", "x");
    std::array<std::size_t, M> out{};
    detail::reshape_target(x.shape(), x.size(), shape, out);
    detail::StridedMap map;
    map.push(x.size(), 1);
    return detail::gather<M>(x, out, map, "reshape");
}
// reshape(x, {2, -1, 4}) or reshape<3>(x, {2, -1, 4}).
template <std::size_t M, Real T, std::size_t N>
Var<T, M> reshape(const Var<T, N>& x, const long (&shape)[M]) {
    std::array<long, M> s;
    std::copy(shape, shape + M, s.begin());
    return reshape<M>(x, s);
}

// ---- permute (torch.permute): y's axis k is x's axis order[k] ----
// Y[i_0..i_{N-1}] = X[j] with j[order[k]] = i_k; dX[j] += dY[i].
template <Real T, std::size_t N>
Var<T, N> permute(const Var<T, N>& x, const std::array<std::size_t, N>& order) {
    static_assert(N <= detail::max_loop_rank, "xgrad: permute supports rank <= 16");
    require_var(x, "permute", "x");
    std::array<bool, N> seen{};
    for (std::size_t k = 0; k < N; ++k) {
        if (order[k] >= N || seen[order[k]])
            throw value_error("permute: " + shape_str(order) + " is not a permutation of the " + std::to_string(N) +
                              " axes of x " + shape_str(x.shape()));
        seen[order[k]] = true;
    }
    std::array<std::size_t, N> out;
    for (std::size_t k = 0; k < N; ++k) out[k] = x.shape()[order[k]];
    return detail::gather<N>(x, out, detail::permuted_map(x.shape(), order), "permute");
}

// ---- transpose (torch.transpose): swaps two axes; negative axes count from the end ----
template <Real T, std::size_t N>
Var<T, N> transpose(const Var<T, N>& x, long dim0, long dim1) {
    static_assert(N >= 1, "xgrad: transpose needs rank >= 1");
    static_assert(N <= detail::max_loop_rank, "xgrad: transpose supports rank <= 16");
    require_var(x, "transpose", "x");
    const std::size_t a = detail::resolve_axis(dim0, x.shape(), "transpose"),
                      b = detail::resolve_axis(dim1, x.shape(), "transpose");
    std::array<std::size_t, N> order, out;
    for (std::size_t k = 0; k < N; ++k) order[k] = k;
    std::swap(order[a], order[b]);
    for (std::size_t k = 0; k < N; ++k) out[k] = x.shape()[order[k]];
    return detail::gather<N>(x, out, detail::permuted_map(x.shape(), order), "transpose");
}

// ---- attention heads (d2l transpose_qkv / transpose_output), each one copy ----
namespace detail {
template <class S>
std::size_t head_dim(const S& s, std::size_t num_heads, const char* op) {
    if (num_heads == 0) throw value_error(std::string(op) + ": num_heads must be positive");
    if (s[2] % num_heads != 0)
        throw shape_error(std::string(op) + ": the last dim of x " + shape_str(s) + " is not divisible by num_heads " +
                          std::to_string(num_heads));
    return s[2] / num_heads;
}
}  // namespace detail

// x (B, T, H·D) -> (B·H, T, D) (M = 3, the default: d2l's transpose_qkv) or (B, H, T, D) (M = 4):
// Y[b·H + h, t, d] = Y[b, h, t, d] = X[b, t, h·D + d]; dX[b, t, h·D + d] += dY at the same place.
template <std::size_t M = 3, Real T, std::size_t N>
Var<T, M> split_heads(const Var<T, N>& x, std::size_t num_heads) {
    static_assert(N == 3, "xgrad: split_heads needs a rank-3 input (B, T, H*D)");
    static_assert(M == 3 || M == 4, "xgrad: split_heads<3> gives (B*H, T, D), split_heads<4> (B, H, T, D)");
    require_var(x, "split_heads", "x");
    const auto s = detail::heads_shape3(x.shape());
    const std::size_t D = detail::head_dim(s, num_heads, "split_heads");
    std::array<std::size_t, M> out;
    if constexpr (M == 3) out = {s[0] * num_heads, s[1], D};
    else out = {s[0], num_heads, s[1], D};
    return detail::gather<M>(x, out, detail::split_heads_map(s[0], s[1], num_heads, D), "split_heads");
}
// x (B·H, T, D) with num_heads (d2l's transpose_output), or (B, H, T, D) -> (B, T, H·D):
// Y[b, t, h·D + d] = X[b·H + h, t, d] = X[b, h, t, d]; dX at the same place += dY[b, t, h·D + d].
// With a rank-4 x, num_heads may be left 0 (it is x's axis 1) or must equal it.
template <Real T, std::size_t N>
Var<T, 3> merge_heads(const Var<T, N>& x, std::size_t num_heads = 0) {
    static_assert(N == 3 || N == 4, "xgrad: merge_heads needs (B*H, T, D) with num_heads, or (B, H, T, D)");
    require_var(x, "merge_heads", "x");
    const auto& s = x.shape();
    if constexpr (N == 4) {
        if (num_heads != 0 && num_heads != s[1])
            throw shape_error("merge_heads: num_heads " + std::to_string(num_heads) + " differs from axis 1 of x " +
                              shape_str(s));
        num_heads = s[1];
    } else if (num_heads == 0) {
        throw value_error("merge_heads: num_heads must be positive");
    } else if (s[0] % num_heads != 0) {
        throw shape_error("merge_heads: the first dim of x " + shape_str(s) + " is not divisible by num_heads " +
                          std::to_string(num_heads));
    }
    const std::size_t B = N == 4 ? s[0] : s[0] / num_heads, L = s[N - 2], D = s[N - 1];
    return detail::gather<3>(x, std::array<std::size_t, 3>{B, L, num_heads * D},
                             detail::merge_heads_map(B, num_heads, L, D), "merge_heads");
}

// ---- slice / narrow along one axis ----
namespace detail {
// Y = X[..., start : start + length, ...] (along `ax`); dX[..., start : start + length, ...] += dY.
template <Real T, std::size_t N>
Var<T, N> take_range(const Var<T, N>& x, std::size_t ax, std::size_t start, std::size_t length, const char* op) {
    static_assert(N <= max_loop_rank, "xgrad: slice and narrow support rank <= 16");
    const auto strides = contiguous_strides(x.shape());
    std::array<std::size_t, N> out;
    StridedMap map;
    for (std::size_t k = 0; k < N; ++k) {
        out[k] = k == ax ? length : x.shape()[k];
        map.push(out[k], strides[k]);
    }
    map.offset = start * strides[ax];
    return gather<N>(x, out, map, op);
}
}  // namespace detail

// x[start:stop] along `axis` (negative start/stop count from the end); needs 0 <= start <= stop <= size.
template <Real T, std::size_t N>
Var<T, N> slice(const Var<T, N>& x, long axis, long start, long stop) {
    static_assert(N >= 1, "xgrad: slice needs rank >= 1");
    require_var(x, "slice", "x");
    const std::size_t ax = detail::resolve_axis(axis, x.shape(), "slice");
    const long size = static_cast<long>(x.shape()[ax]);
    const long b = start < 0 ? start + size : start, e = stop < 0 ? stop + size : stop;
    if (b < 0 || b > e || e > size)
        throw value_error("slice: range [" + detail::long_str(start) + ", " + detail::long_str(stop) +
                          ") is invalid for axis " + std::to_string(ax) + " of x " + shape_str(x.shape()));
    return detail::take_range(x, ax, std::size_t(b), std::size_t(e - b), "slice");
}

// torch.narrow: `length` elements along `axis` from `start` (negative start counts from the end).
template <Real T, std::size_t N>
Var<T, N> narrow(const Var<T, N>& x, long axis, long start, long length) {
    static_assert(N >= 1, "xgrad: narrow needs rank >= 1");
    require_var(x, "narrow", "x");
    const std::size_t ax = detail::resolve_axis(axis, x.shape(), "narrow");
    const long size = static_cast<long>(x.shape()[ax]);
    const long b = start < 0 ? start + size : start;
    if (b < 0 || b > size || length < 0 || length > size - b)
        throw value_error("narrow: start " + detail::long_str(start) + " and length " + detail::long_str(length) +
                          " are out of range for axis " + std::to_string(ax) + " of x " + shape_str(x.shape()));
    return detail::take_range(x, ax, std::size_t(b), std::size_t(length), "narrow");
}

// ---- expand / broadcast_to (numpy rules: extent-1 axes and new leading axes repeat) ----
// Y (shape) = X broadcast; dX (x's shape) += dY summed over the broadcast axes.
template <std::size_t M, Real T, std::size_t N>
Var<T, M> expand(const Var<T, N>& x, const std::array<std::size_t, M>& shape) {
    static_assert(M >= N, "xgrad: expand cannot lower the rank (the target needs rank >= the input's)");
    static_assert(M <= detail::max_loop_rank, "xgrad: expand supports rank <= 16");
    require_var(x, "expand", "x");
    std::size_t count;
    if (!detail::checked_numel(shape, count))
        throw shape_error("expand: cannot broadcast x of shape " + shape_str(x.shape()) + " to " + shape_str(shape) +
                          ": more elements than size_t can count");
    const auto strides = detail::contiguous_strides(x.shape());
    detail::StridedMap map;
    for (std::size_t k = 0; k < M; ++k) {
        if (k < M - N) {
            map.push(shape[k], 0);
            continue;
        }
        const std::size_t j = k - (M - N), d = x.shape()[j];
        if (d != shape[k] && d != 1)
            throw shape_error("expand: cannot broadcast x of shape " + shape_str(x.shape()) + " to " + shape_str(shape));
        map.push(shape[k], d == 1 ? 0 : strides[j]);
    }
    return detail::gather<M>(x, shape, map, "expand");
}
template <std::size_t M, Real T, std::size_t N>
Var<T, M> expand(const Var<T, N>& x, const std::size_t (&shape)[M]) {
    std::array<std::size_t, M> s;
    std::copy(shape, shape + M, s.begin());
    return expand<M>(x, s);
}
template <std::size_t M, Real T, std::size_t N>
Var<T, M> broadcast_to(const Var<T, N>& x, const std::array<std::size_t, M>& shape) {
    return expand<M>(x, shape);
}
template <std::size_t M, Real T, std::size_t N>
Var<T, M> broadcast_to(const Var<T, N>& x, const std::size_t (&shape)[M]) {
    return expand<M>(x, shape);
}

// ---- elementwise expressions are materialized first ----
template <std::size_t M, LazyExpression E>
auto reshape(const E& e, const std::array<long, M>& shape) {
    return reshape<M>(eval(e), shape);
}
template <LazyExpression E>
auto permute(const E& e, const std::array<std::size_t, E::rank>& order) {
    return permute(eval(e), order);
}
template <LazyExpression E>
auto transpose(const E& e, long dim0, long dim1) {
    return transpose(eval(e), dim0, dim1);
}
template <LazyExpression E>
auto slice(const E& e, long axis, long start, long stop) {
    return slice(eval(e), axis, start, stop);
}
template <LazyExpression E>
auto narrow(const E& e, long axis, long start, long length) {
    return narrow(eval(e), axis, start, length);
}
template <std::size_t M, LazyExpression E>
auto expand(const E& e, const std::array<std::size_t, M>& shape) {
    return expand<M>(eval(e), shape);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SHAPE_COMPILED(EXTERN, T, N)                                                   \
    EXTERN template Var<T, N> slice<T, N>(const Var<T, N>&, long, long, long);                      \
    EXTERN template Var<T, N> transpose<T, N>(const Var<T, N>&, long, long);                        \
    EXTERN template Var<T, N> permute<T, N>(const Var<T, N>&, const std::array<std::size_t, N>&);
#define XGRAD_DETAIL_SHAPES_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_SHAPE_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_SHAPES_COMPILED)
#undef XGRAD_DETAIL_SHAPES_COMPILED
#undef XGRAD_DETAIL_SHAPE_COMPILED
}  // namespace xgrad
