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

#include "xgrad/core/expr.hpp"
#include "xgrad/ops/axis.hpp"
#include "xgrad/ops/mask.hpp"

namespace xgrad {
namespace detail {

// y = softmax or log_softmax of x along one axis, seen as x (outer, A, inner).
// forward() normalizes this->value IN PLACE: the caller fills it with the scores first (x itself,
// or x with -inf at masked positions). backward() needs only the output y, never the mask.
template <Real T, std::size_t N>
class SoftmaxNode final : public TensorNode<T, N> {
public:
    Var<T, N> x;  // held only when this node requires grad
    bool log = false;
    bool zero_masked_rows = false;  // masked_softmax: a row that is all -inf (fully masked) gives 0
    const char* name = "softmax";
    AxisSplit split;
    std::vector<T> stats;  // per outer block: running max and sum, each of length inner

    const char* op_name() const override { return name; }
    bool allows_negative_infinity() const override { return log; }  // log 0 of a masked entry
    void release_inputs() override { x = {}; }
    void for_each_input(const Node::InputVisitor& f) const override { xgrad::visit_inputs(f, x); }

    void forward() {
        const auto [outer, extent, inner] = split;
        constexpr T neg_inf = -std::numeric_limits<T>::infinity();
        stats.resize(2 * inner);
        T* row_max = stats.data();
        T* row_sum = row_max + inner;
        for (std::size_t o = 0; o < outer; ++o) {
            T* y = this->value.data() + o * extent * inner;
            std::fill(row_max, row_max + inner, neg_inf);
            std::fill(row_sum, row_sum + inner, T(0));
            for (std::size_t a = 0; a < extent; ++a)
                for (std::size_t i = 0; i < inner; ++i) {
                    const T v = y[a * inner + i];
                    if (v > row_max[i] || std::isnan(v)) row_max[i] = v;  // a NaN max sticks (std::max drops NaN)
                }
            if (log) {
                // y = s - max - log Σ exp(s - max)
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) row_sum[i] += std::exp(y[a * inner + i] - row_max[i]);
                for (std::size_t i = 0; i < inner; ++i) row_sum[i] = row_max[i] + std::log(row_sum[i]);
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) y[a * inner + i] -= row_sum[i];
            } else {
                // y = exp(s - max) / Σ exp(s - max); an all -inf row gives NaN (-inf - -inf), as
                // PyTorch, except a fully masked row of masked_softmax, which stays 0
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) {
                        T& v = y[a * inner + i];
                        v = zero_masked_rows && row_max[i] == neg_inf ? T(0) : std::exp(v - row_max[i]);
                        row_sum[i] += v;
                    }
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i)
                        if (!(zero_masked_rows && row_max[i] == neg_inf)) y[a * inner + i] /= row_sum[i];
            }
        }
    }

    void backward() override {
        if (!x.requires_grad()) return;
        const auto [outer, extent, inner] = split;
        const T* y_all = this->value.data();
        const T* gy_all = this->grad_buffer().data();
        T* gx_all = x.node()->grad_buffer().data();
        stats.resize(inner);
        T* dot = stats.data();
        for (std::size_t o = 0; o < outer; ++o) {
            const std::size_t base = o * extent * inner;
            const T *y = y_all + base, *gy = gy_all + base;
            T* gx = gx_all + base;
            std::fill(dot, dot + inner, T(0));
            if (log) {
                // Σ_A dY: (outer, 1, inner)
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) dot[i] += gy[a * inner + i];
                // dX (outer, A, inner) += dY (outer, A, inner) − exp(Y) (outer, A, inner) ⊙ Σ_A dY (outer, 1, inner)
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) {
                        const std::size_t k = a * inner + i;
                        gx[k] += gy[k] - std::exp(y[k]) * dot[i];
                    }
            } else {
                // Σ_A dY ⊙ Y: (outer, 1, inner)
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) dot[i] += gy[a * inner + i] * y[a * inner + i];
                // dX (outer, A, inner) += Y (outer, A, inner) ⊙ (dY (outer, A, inner) − Σ_A dY ⊙ Y (outer, 1, inner))
                // (masked positions have Y = 0, so they receive exactly 0)
                for (std::size_t a = 0; a < extent; ++a)
                    for (std::size_t i = 0; i < inner; ++i) {
                        const std::size_t k = a * inner + i;
                        gx[k] += y[k] * (gy[k] - dot[i]);
                    }
            }
        }
    }
};

template <Real T, std::size_t N>
Var<T, N> softmax_impl(const Var<T, N>& x, long axis, bool log) {
    static_assert(N >= 1, "xgrad: softmax and log_softmax need rank >= 1");
    const char* name = log ? "log_softmax" : "softmax";
    require_var(x, name, "x");
    const std::size_t ax = resolve_axis(axis, x.shape(), name);
    auto node = make_node<SoftmaxNode<T, N>>(x.requires_grad());
    node->x = node->requires_grad ? x : Var<T, N>{};
    node->log = log;
    node->zero_masked_rows = false;
    node->name = name;
    node->split = split_at(x.shape(), ax);
    if (node->value.shape() != x.shape()) node->value.resize(x.shape());
    xt::noalias(node->value) = x.value();
    node->forward();
    return Var<T, N>(node);
}

// ---- masks: validate against the scores' shape, then write -inf (or add the bias) into them ----

// Strides of a mask broadcast (numpy, right-aligned) to `shape`: 0 along broadcast axes. `op` names
// the caller in errors (masked_softmax, or scaled_dot_product_attention validating first).
template <std::size_t N, class U, std::size_t M, class S>
std::array<std::size_t, N> broadcast_strides(const xt::xtensor<U, M>& mask, const S& shape, const char* what,
                                             const char* op = "masked_softmax") {
    static_assert(M <= N, "xgrad: masked_softmax: a mask cannot have more axes than the scores");
    std::array<std::size_t, N> strides{};
    std::size_t stride = 1;
    for (std::size_t j = M; j-- > 0;) {
        const std::size_t k = j + (N - M);
        const std::size_t dm = mask.shape()[j];
        if (dm != shape[k] && dm != 1)
            throw shape_error(std::string(op) + ": " + what + " of shape " + shape_str(mask.shape()) +
                              " does not broadcast to the scores of shape " + shape_str(shape));
        strides[k] = dm == 1 ? 0 : stride;
        stride *= dm;
    }
    return strides;
}

// Calls f(score_row, mask_row, mask_stride) for each last-axis row of `scores`, the mask broadcast to it.
template <Real T, std::size_t N, class U, std::size_t M, class F>
void for_each_masked_row(xt::xtensor<T, N>& scores, const xt::xtensor<U, M>& mask, F f) {
    const auto strides = broadcast_strides<N>(mask, scores.shape(), "mask");
    const std::size_t S = scores.shape()[N - 1];
    std::size_t rows = 1;
    for (std::size_t k = 0; k + 1 < N; ++k) rows *= scores.shape()[k];
    std::array<std::size_t, N> index{};
    std::size_t offset = 0;
    for (std::size_t r = 0; r < rows; ++r) {
        f(scores.data() + r * S, mask.data() + offset, strides[N - 1]);
        for (std::size_t k = N - 1; k-- > 0;) {  // odometer over the leading axes
            offset += strides[k];
            if (++index[k] < scores.shape()[k]) break;
            offset -= strides[k] * scores.shape()[k];
            index[k] = 0;
        }
    }
}

template <std::size_t N, class S, std::size_t M>
void validate_mask(const IgnoreMask<M>& m, const S& shape, const char* op) {
    broadcast_strides<N>(m.mask, shape, "ignore_mask", op);
}
template <std::size_t N, class S, std::size_t M>
void validate_mask(const KeepMask<M>& m, const S& shape, const char* op) {
    broadcast_strides<N>(m.mask, shape, "keep_mask", op);
}
template <std::size_t N, class S, class U, std::size_t M>
void validate_mask(const AdditiveMask<U, M>& m, const S& shape, const char* op) {
    broadcast_strides<N>(m.bias, shape, "additive_mask", op);
}
template <std::size_t N, class S>
void validate_mask(causal_t, const S&, const char*) {
    static_assert(N >= 2, "xgrad: masked_softmax with causal needs scores of rank >= 2 (..., L, S)");
}
template <std::size_t N, class S, std::size_t V>
void validate_mask(const ValidLens<V>& v, const S& shape, const char* op) {
    static_assert(V >= 1 && V < N,
                  "xgrad: masked_softmax: valid_lens must have rank 1 .. rank(scores) - 1 (d2l: (B,) or (B, Q))");
    if (!std::equal(v.lens.shape().begin(), v.lens.shape().end(), shape.begin()))
        throw shape_error(std::string(op) + ": valid_lens of shape " + shape_str(v.lens.shape()) +
                          " must equal the leading axes of the scores of shape " + shape_str(shape));
    for (std::int64_t len : v.lens)
        if (len < 0) throw value_error(std::string(op) + ": valid_lens holds a negative length " + std::to_string(len));
}

template <Real T, std::size_t N, std::size_t M>
void apply_mask(xt::xtensor<T, N>& s, const IgnoreMask<M>& m) {
    for_each_masked_row(s, m.mask, [&](T* row, const bool* ignore, std::size_t stride) {
        for (std::size_t j = 0; j < s.shape()[N - 1]; ++j)
            if (ignore[j * stride]) row[j] = -std::numeric_limits<T>::infinity();
    });
}
template <Real T, std::size_t N, std::size_t M>
void apply_mask(xt::xtensor<T, N>& s, const KeepMask<M>& m) {
    for_each_masked_row(s, m.mask, [&](T* row, const bool* keep, std::size_t stride) {
        for (std::size_t j = 0; j < s.shape()[N - 1]; ++j)
            if (!keep[j * stride]) row[j] = -std::numeric_limits<T>::infinity();
    });
}
template <Real T, std::size_t N, class U, std::size_t M>
void apply_mask(xt::xtensor<T, N>& s, const AdditiveMask<U, M>& m) {
    static_assert(std::same_as<T, U>, "xgrad: additive_mask must have the scores' element type (float or double)");
    for_each_masked_row(s, m.bias, [&](T* row, const T* bias, std::size_t stride) {
        for (std::size_t j = 0; j < s.shape()[N - 1]; ++j) row[j] += bias[j * stride];
    });
}
template <Real T, std::size_t N>
void apply_mask(xt::xtensor<T, N>& s, causal_t) {
    const std::size_t L = s.shape()[N - 2], S = s.shape()[N - 1];
    for (std::size_t r = 0; r < s.size() / std::max<std::size_t>(S, 1); ++r)
        for (std::size_t j = r % L + 1; j < S; ++j) s.data()[r * S + j] = -std::numeric_limits<T>::infinity();
}
template <Real T, std::size_t N, std::size_t V>
void apply_mask(xt::xtensor<T, N>& s, const ValidLens<V>& v) {
    const std::size_t S = s.shape()[N - 1];
    std::size_t rows_per_len = 1;  // rows sharing one length: the axes between lens' and the last
    for (std::size_t k = V; k + 1 < N; ++k) rows_per_len *= s.shape()[k];
    for (std::size_t r = 0; r < s.size() / std::max<std::size_t>(S, 1); ++r) {
        const auto len = static_cast<std::size_t>(v.lens.data()[r / rows_per_len]);
        for (std::size_t j = len; j < S; ++j) s.data()[r * S + j] = -std::numeric_limits<T>::infinity();
    }
}

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
    detail::require_var(x, "masked_softmax", "x");
    (detail::validate_mask<N>(masks, x.shape(), "masked_softmax"), ...);  // throws before anything is recorded
    auto node = make_node<detail::SoftmaxNode<T, N>>(x.requires_grad());
    node->x = node->requires_grad ? x : Var<T, N>{};
    node->log = false;
    node->zero_masked_rows = true;
    node->name = "masked_softmax";
    node->split = detail::split_at(x.shape(), N - 1);
    if (node->value.shape() != x.shape()) node->value.resize(x.shape());
    xt::noalias(node->value) = x.value();
    (detail::apply_mask(node->value, masks), ...);
    node->forward();
    return Var<T, N>(node);
}

// Expressions are materialized first: softmax(a * b, -1), masked_softmax(scores * scale, causal).
template <Expression E>
    requires(!requires(E e) { e.node(); })
auto softmax(const E& e, long axis) {
    return softmax(eval(e), axis);
}
template <Expression E>
    requires(!requires(E e) { e.node(); })
auto log_softmax(const E& e, long axis) {
    return log_softmax(eval(e), axis);
}
template <Expression E, SoftmaxMask... Masks>
    requires(!requires(E e) { e.node(); } && sizeof...(Masks) >= 1)
auto masked_softmax(const E& e, const Masks&... masks) {
    return masked_softmax(eval(e), masks...);
}

}  // namespace xgrad
