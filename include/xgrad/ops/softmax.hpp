// softmax / log_softmax over any axis, and masked_softmax over the last axis (attention weights).
//
// All are numerically stable (the row max is subtracted before exp). softmax and log_softmax follow
// PyTorch exactly: NaN propagates through a row and a row that is all -inf gives NaN. In
// masked_softmax a masked position gets weight exactly 0 and gradient exactly 0, and a FULLY masked
// row gives all-zero weights and zero gradient instead of PyTorch's NaN (pytorch/pytorch#41508).
// Other rows equal PyTorch's softmax of the scores with -inf at the masked positions (so a NaN
// score that is not masked makes its row NaN).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xnoalias.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/ops/axis.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"

namespace xgrad {
namespace detail {

// y = softmax or log_softmax of x along one axis, seen as x (outer, A, inner).
// forward() copies x into this->value and normalizes it there IN PLACE, applying the masks of
// masked_softmax on the way. backward() needs only the output y, never the mask.
template <Real T, std::size_t N>
class SoftmaxNode final : public OpNode<SoftmaxNode<T, N>, T, N> {
public:
    Var<T, N> x;  // held only when this node requires grad
    bool log = false;
    bool zero_masked_rows = false;  // masked_softmax: a row that is all -inf (fully masked) gives 0
    const char* name = "softmax";
    AxisSplit split;

    const char* op_name() const override { return name; }
    bool allows_negative_infinity() const override { return log; }  // log 0 of a masked entry
    auto inputs() { return std::tie(x); }

    // masks: masked_softmax's, over the last axis (inner 1)
    void forward(const kernels::ScoreMasks<T>* masks = nullptr) {
        using kernels::softmax_rows, kernels::softmax_columns;
        xt::noalias(this->value) = x.value();
        const auto [outer, extent, inner] = split;
        const auto empty = zero_masked_rows ? kernels::EmptyLine::zeros : kernels::EmptyLine::nan;
        T* y = this->value.data();
        if (masks) {
            softmax_rows(y, outer, extent, extent, empty, kernels::RowMasks<T>{*masks, 0, {0, extent, true}});
            return;
        }
        if (inner == 1) {
            if (log) softmax_rows<true>(y, outer, extent, extent, empty, kernels::NoMasks<T>{});
            else softmax_rows(y, outer, extent, extent, empty, kernels::NoMasks<T>{});
            return;
        }
        for (std::size_t o = 0; o < outer; ++o) {  // (extent, inner) blocks: down the columns
            if (log) softmax_columns<true>(y + o * extent * inner, extent, inner, inner, empty);
            else softmax_columns(y + o * extent * inner, extent, inner, inner, empty);
        }
    }

    // dX (outer, A, inner) += Y ⊙ (dY − Σ_A dY ⊙ Y)   (softmax; masked positions have Y = 0: dX 0 there)
    // dX (outer, A, inner) += dY − exp(Y) ⊙ Σ_A dY     (log_softmax)
    void backward() override {
        if (!x.requires_grad()) return;
        const auto [outer, extent, inner] = split;
        using kernels::softmax_backward_rows, kernels::softmax_backward_columns;
        const T *y = this->value.data(), *dy = this->grad_buffer().data();
        const auto [dx, beta] = x.node()->grad_target();
        if (inner == 1) {
            if (log) softmax_backward_rows<true>(y, dy, dx, extent, 0, outer, 0, extent, T(1), beta);
            else softmax_backward_rows(y, dy, dx, extent, 0, outer, 0, extent, T(1), beta);
            return;
        }
        for (std::size_t o = 0; o < outer; ++o) {
            const std::size_t at = o * extent * inner;
            if (log) softmax_backward_columns<true>(y + at, dy + at, dx + at, extent, inner, inner, T(1), beta);
            else softmax_backward_columns(y + at, dy + at, dx + at, extent, inner, inner, T(1), beta);
        }
    }
};

template <Real T, std::size_t N>
Var<T, N> softmax_impl(const Var<T, N>& x, long axis, bool log) {
    static_assert(N >= 1, "xgrad: softmax and log_softmax need rank >= 1");
    const char* name = log ? "log_softmax" : "softmax";
    require_var(x, name, "x");
    const std::size_t ax = resolve_axis(axis, x.shape(), name);
    return make_op<SoftmaxNode<T, N>>(x.shape(), [&](auto& node) {
        node.log = log;
        node.zero_masked_rows = false;
        node.name = name;
        node.split = split_at(x.shape(), ax);
        node.forward();
    }, x);
}

// masked_softmax over the last axis of x with masks already merged against x's shape.
template <Real T, std::size_t N>
Var<T, N> masked_softmax_merged(const Var<T, N>& x, const kernels::ScoreMasks<T>& masks) {
    return make_op<SoftmaxNode<T, N>>(x.shape(), [&](auto& node) {
        node.log = false;
        node.zero_masked_rows = true;
        node.name = "masked_softmax";
        node.split = split_at(x.shape(), N - 1);
        node.forward(&masks);
    }, x);
}

template <class M, std::size_t N>
inline constexpr bool mask_fits_rank = true;
template <std::size_t N>
inline constexpr bool mask_fits_rank<causal_t, N> = N >= 2;
template <std::size_t V, std::size_t N>
inline constexpr bool mask_fits_rank<ValidLens<V>, N> = V >= 1 && V < N;

}  // namespace detail

// softmax(x, axis): exp(x) / Σ_axis exp(x), any rank, axis may be negative.
template <Real T, std::size_t N>
Var<T, N> softmax(const Var<T, N>& x, long axis) {
    return detail::softmax_impl(x, axis, false);
}
// log_softmax(x, axis): x − log Σ_axis exp(x).
template <Real T, std::size_t N>
Var<T, N> log_softmax(const Var<T, N>& x, long axis) {
    return detail::softmax_impl(x, axis, true);
}

// masked_softmax(scores, mask...): softmax over the LAST axis with one or more masks (mask.hpp);
// a position masked by any of them is masked.
template <Real T, std::size_t N, SoftmaxMask... Masks>
    requires(sizeof...(Masks) >= 1)
Var<T, N> masked_softmax(const Var<T, N>& x, const Masks&... masks) {
    static_assert(N >= 1, "xgrad: masked_softmax needs rank >= 1");
    static_assert((detail::mask_fits_rank<std::remove_cvref_t<Masks>, N> && ...),
                  "xgrad: masked_softmax: causal needs scores of rank >= 2 (..., L, S); valid_lens a rank from 1 to "
                  "rank(scores) - 1 (d2l: (B,) or (B, Q))");
    require_var(x, "masked_softmax", "x");
    // merged (and so checked) before anything is recorded
    return detail::masked_softmax_merged(x, detail::merged_masks<T>(x.shape(), "masked_softmax", masks...));
}

// Expressions are materialized first: softmax(a * b, -1), masked_softmax(scores * scale, causal).
template <LazyExpression E>
auto softmax(const E& e, long axis) {
    return softmax(eval(e), axis);
}
template <LazyExpression E>
auto log_softmax(const E& e, long axis) {
    return log_softmax(eval(e), axis);
}
template <LazyExpression E, SoftmaxMask... Masks>
    requires(sizeof...(Masks) >= 1)
auto masked_softmax(const E& e, const Masks&... masks) {
    return masked_softmax(eval(e), masks...);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SOFTMAX_COMPILED(EXTERN, T, N)                              \
    EXTERN template Var<T, N> softmax<T, N>(const Var<T, N>&, long);             \
    EXTERN template Var<T, N> log_softmax<T, N>(const Var<T, N>&, long);
#define XGRAD_DETAIL_SOFTMAXES_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_SOFTMAX_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_SOFTMAXES_COMPILED)
#undef XGRAD_DETAIL_SOFTMAXES_COMPILED
#undef XGRAD_DETAIL_SOFTMAX_COMPILED
}  // namespace xgrad
