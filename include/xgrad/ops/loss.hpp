// Losses, as torch.nn.functional defines them: mse_loss and cross_entropy.
//
// The reduction decides the result's static rank, so it is chosen in the call:
//   mse_loss(x, t)                      mean  -> Var<T, 0>
//   mse_loss(x, t, LossReduction::sum)  sum   -> Var<T, 0>
//   mse_loss(x, t, unreduced)           none  -> Var<T, N> (torch's reduction='none')
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/ops/axis.hpp"

namespace xgrad {

// How a loss reduces its per-element losses to a scalar (not xgrad::Reduction, the sum/mean/max ops).
enum class LossReduction { mean, sum };

// Tag: keep one loss per element (torch's reduction='none').
struct unreduced_t {
    explicit unreduced_t() = default;
};
inline constexpr unreduced_t unreduced{};

struct CrossEntropyOptions {
    std::int64_t ignore_index = -100;  // targets equal to this add no loss, no gradient, no count
    double label_smoothing = 0;        // ε in [0, 1]: target q = (1-ε)·one_hot(y) + ε/C
    LossReduction reduction = LossReduction::mean;  // not used by the unreduced overload
    // The logits' class axis: 1 as in PyTorch ((N, C, d...); (C) logits: 0), or -1 for the last, as
    // a language model's (B, T, V) logits: nanoGPT's cross_entropy(logits.view(-1, V), y.view(-1))
    // without the view.
    int class_axis = 1;
};

namespace detail {

enum class LossMode { none, mean, sum };

inline LossMode loss_mode(LossReduction r) { return r == LossReduction::sum ? LossMode::sum : LossMode::mean; }

// ---- mse_loss: ℓ_i = (x_i − t_i)²; mean divides Σℓ by the element count ----
template <Real T, std::size_t N, std::size_t M>
class MseLossNode final : public OpNode<MseLossNode<T, N, M>, T, M> {
public:
    Var<T, N> input, target;
    LossMode mode = LossMode::mean;

    const char* op_name() const override { return "mse_loss"; }
    auto inputs() { return std::tie(input, target); }

    void forward() {
        const T* x = input.value().data();
        const T* t = target.value().data();
        const std::size_t n = input.size();
        T* y = this->value.data();
        if (mode == LossMode::none) {
            for (std::size_t i = 0; i < n; ++i) y[i] = (x[i] - t[i]) * (x[i] - t[i]);
            return;
        }
        const T total = sum_squared_difference(x, t, n);
        y[0] = mode == LossMode::mean ? total / T(n) : total;  // mean of nothing is NaN, as torch
    }

    // Σ (x_i − t_i)², W lanes at a time in 4 independent sums (a single running sum is bound by
    // the add latency)
    static T sum_squared_difference(const T* x, const T* t, std::size_t n) {
        using batch = simd::Vec<T>;
        constexpr std::size_t W = simd::lanes<T>;
        std::array<batch, 4> lanes_sum{batch(T(0)), batch(T(0)), batch(T(0)), batch(T(0))};
        std::size_t i = 0;
        for (; i + 4 * W <= n; i += 4 * W)
            for (std::size_t a = 0; a < 4; ++a) {
                const batch d = batch::load_unaligned(x + i + a * W) - batch::load_unaligned(t + i + a * W);
                lanes_sum[a] = xsimd::fma(d, d, lanes_sum[a]);
            }
        T total = simd::reduce_add((lanes_sum[0] + lanes_sum[1]) + (lanes_sum[2] + lanes_sum[3]));
        for (; i < n; ++i) total += (x[i] - t[i]) * (x[i] - t[i]);
        return total;
    }

    void backward() override {
        // none: dX (shape of x) += 2 (X − T) ⊙ dY (shape of x);  dT −= the same
        // mean: dX += 2 (X − T) · dY () / n;   sum: dX += 2 (X − T) · dY ()
        const T* x = input.value().data();
        const T* t = target.value().data();
        const T* gy = this->grad_buffer().data();
        const std::size_t n = input.size();
        const T scale = mode == LossMode::mean ? gy[0] / T(n) : gy[0];
        // each gradient is overwritten on its first write in the pass (beta 0: not read), else added
        // to; one loop per case, so that each vectorizes
        const auto write = [&](T* g, bool first_write, T sign, auto dy_of) {
            if (first_write)
                for (std::size_t i = 0; i < n; ++i) g[i] = sign * (T(2) * (x[i] - t[i]) * dy_of(i));
            else
                for (std::size_t i = 0; i < n; ++i) g[i] += sign * (T(2) * (x[i] - t[i]) * dy_of(i));
        };
        const auto both = [&](auto dy_of) {
            if (input.requires_grad()) {
                const auto [gx, beta] = input.node()->grad_target();
                write(gx, beta == T(0), T(1), dy_of);
            }
            if (target.requires_grad()) {
                const auto [gt, beta] = target.node()->grad_target();
                write(gt, beta == T(0), T(-1), dy_of);
            }
        };
        if (mode == LossMode::none) both([&](std::size_t i) { return gy[i]; });
        else both([&](std::size_t) { return scale; });
    }
};

template <std::size_t M, Real T, std::size_t N>
Var<T, M> mse_loss_impl(const Var<T, N>& input, const Var<T, N>& target, LossMode mode) {
    require_var(input, "mse_loss", "input");
    require_var(target, "mse_loss", "target");
    if (input.shape() != target.shape())
        throw shape_error("mse_loss: input " + shape_str(input.shape()) + " and target " + shape_str(target.shape()) +
                          " must have the same shape");
    std::array<std::size_t, M> shape;
    if constexpr (M > 0) std::copy(input.shape().begin(), input.shape().end(), shape.begin());
    return make_op<MseLossNode<T, N, M>>(shape, [&](auto& node) {
        node.mode = mode;
        node.forward();
    }, input, target);
}

// ---- cross_entropy: logits (B, C, d...) seen as (outer = B, C, inner = Πd); class axis 1 ----
// Per position: ℓ = −(1−ε)·log p_y − (ε/C)·Σ_c log p_c, with log p = log_softmax over C.
// mean divides Σℓ by the number of non-ignored targets (0 of them: NaN, as torch).

// The options and targets of a cross-entropy over `classes` classes, checked for `op`.
inline void check_class_targets(const char* op, const std::int64_t* targets, std::size_t count, std::size_t classes,
                                std::int64_t ignore_index, double label_smoothing) {
    if (!(label_smoothing >= 0 && label_smoothing <= 1))
        throw value_error(std::string(op) + ": label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
    const auto C = static_cast<std::int64_t>(classes);
    for (std::size_t k = 0; k < count; ++k)
        if (targets[k] != ignore_index && (targets[k] < 0 || targets[k] >= C))
            throw value_error(std::string(op) + ": target " + std::to_string(targets[k]) + " at flat index " +
                              std::to_string(k) + " is out of range for " + std::to_string(C) + " classes [0, " +
                              std::to_string(C) + ") (ignore_index is " + std::to_string(ignore_index) + ")");
}

// One row's loss from its log-probabilities lp (C) and target y: −(1−ε)·lp_y − ε/C · Σ lp.
template <Real T>
T cross_entropy_row_loss(const T* lp, std::size_t C, std::int64_t y, T eps) {
    T loss = -(1 - eps) * lp[y];
    if (eps != 0) loss -= eps / T(C) * std::accumulate(lp, lp + C, T(0));
    return loss;
}

// One row's gradient dZ (C) = beta · dZ + s · (exp(z − lse) − q), q = (1−ε)·one_hot(y) + ε/C; beta 0
// or 1 (0: dZ not read). z may be dZ itself (z = log p and lse 0 turns a row of log p into its gradient).
template <Real T>
void cross_entropy_row_grad(const T* z, T lse, std::size_t C, std::int64_t y, T s, T eps, T* g, T beta) {
    using batch = simd::Vec<T>;
    const batch vs(s), smoothing(s * eps / T(C)), shift(lse);
    kernels::for_each_vector(z, C, T(0), [&](std::size_t j, std::size_t count, batch v) {
        kernels::store_with_beta(g + j, vs * xsimd::exp(v - shift) - smoothing, count, beta);
    });
    g[y] -= s * (1 - eps);
}

template <Real T, std::size_t R, std::size_t M>
class CrossEntropyNode final : public OpNode<CrossEntropyNode<T, R, M>, T, M> {
public:
    Var<T, R> logits;
    std::vector<std::int64_t> targets;  // (outer·inner), row-major like the targets tensor
    std::vector<T> log_prob;            // (outer, C, inner), only rows with a counted target; not in the rows layout
    AxisSplit split;
    CrossEntropyOptions opt;
    LossMode mode = LossMode::mean;
    std::size_t counted = 0;  // non-ignored targets
    std::vector<T> row_loss;  // (outer), the rows layout's losses before their sum
    std::vector<T> row_lse;   // (outer), the rows layout's log Σ exp z: log p = z − lse, recomputed in backward

    const char* op_name() const override { return "cross_entropy"; }
    auto inputs() { return std::tie(logits); }

    void forward() {
        if (split.inner == 1) return forward_rows();
        log_prob.resize(logits.size());
        const auto [outer, C, inner] = split;
        const T* z = logits.value().data();
        const T eps = static_cast<T>(opt.label_smoothing);
        T total = 0;
        counted = 0;
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < inner; ++i) {
                const std::size_t pos = o * inner + i, base = o * C * inner + i;
                T loss = 0;
                if (targets[pos] != opt.ignore_index) {
                    ++counted;
                    T zmax = -std::numeric_limits<T>::infinity();
                    for (std::size_t c = 0; c < C; ++c) zmax = std::max(zmax, z[base + c * inner]);
                    T sum_exp = 0;
                    for (std::size_t c = 0; c < C; ++c) sum_exp += std::exp(z[base + c * inner] - zmax);
                    const T lse = zmax + std::log(sum_exp);
                    T sum_logp = 0;
                    for (std::size_t c = 0; c < C; ++c) {
                        const T lp = z[base + c * inner] - lse;
                        log_prob[base + c * inner] = lp;
                        sum_logp += lp;
                    }
                    loss = -(1 - eps) * log_prob[base + std::size_t(targets[pos]) * inner];
                    if (eps != 0) loss -= eps / T(C) * sum_logp;
                }
                if (mode == LossMode::none) this->value.data()[pos] = loss;
                total += loss;
            }
        if (mode == LossMode::sum) this->value.data()[0] = total;
        if (mode == LossMode::mean) this->value.data()[0] = total / T(counted);  // 0/0 = NaN when all ignored
    }

    // The class axis last ((N, C) logits, the GPT's): a row per position, log_softmax by the row
    // kernels (SIMD exp) into a per-thread row, rows split over xgrad's threads, the losses summed
    // in row order. Only each row's logsumexp is kept, not log p (N, C): the GPT's logits are the
    // largest tensor of its step.
    void forward_rows() {
        const std::size_t rows = split.outer, C = split.extent;
        const T eps = static_cast<T>(opt.label_smoothing);
        const T* z = logits.value().data();
        row_loss.resize(rows), row_lse.resize(rows);
        parallel_for(rows, 16.0 * double(rows) * double(C), [&](std::size_t first, std::size_t last) {
            thread_local std::vector<T> lp;  // log p of one row
            if (lp.size() < C) lp.resize(C);
            for (std::size_t r = first; r < last; ++r) {
                std::copy(z + r * C, z + (r + 1) * C, lp.data());
                kernels::softmax_rows<true>(lp.data(), 1, C, C, kernels::EmptyLine::nan, kernels::NoMasks<T>{}, &row_lse[r]);
                row_loss[r] = targets[r] == opt.ignore_index ? T(0) : cross_entropy_row_loss(lp.data(), C, targets[r], eps);
            }
        });
        T total = 0;
        counted = 0;
        for (std::size_t r = 0; r < rows; ++r) {
            counted += targets[r] != opt.ignore_index;
            if (mode == LossMode::none) this->value.data()[r] = row_loss[r];
            total += row_loss[r];
        }
        if (mode == LossMode::sum) this->value.data()[0] = total;
        if (mode == LossMode::mean) this->value.data()[0] = total / T(counted);  // 0/0 = NaN when all ignored
    }

    // s of a position for the backward: dY (B, d...) for none, dY () for sum, dY () / counted for mean
    T position_scale(const T* gy, std::size_t pos) const {
        return mode == LossMode::none ? gy[pos] : mode == LossMode::sum ? gy[0] : gy[0] / T(counted);
    }

    void backward() override {
        if (!logits.requires_grad()) return;
        // dZ (B, C, d...) += s (B, d...) · (p − q),  q = (1−ε)·one_hot(y) + ε/C over all C classes;
        // s: position_scale; ignored positions: 0
        const auto [outer, C, inner] = split;
        const T* gy = this->grad_buffer().data();
        T* gz = logits.node()->grad_buffer().data();
        const T eps = static_cast<T>(opt.label_smoothing);
        if (inner == 1) {  // rows: dZ row += s · exp(z − lse) − s·ε/C, then −s·(1−ε) at the target
            const T* z = logits.value().data();
            return parallel_for(outer, 12.0 * double(outer) * double(C), [&](std::size_t first, std::size_t last) {
                for (std::size_t r = first; r < last; ++r)
                    if (targets[r] != opt.ignore_index)
                        cross_entropy_row_grad(z + r * C, row_lse[r], C, targets[r], position_scale(gy, r), eps,
                                               gz + r * C, T(1));
            });
        }
        for (std::size_t o = 0; o < outer; ++o)
            for (std::size_t i = 0; i < inner; ++i) {
                const std::size_t pos = o * inner + i, base = o * C * inner + i;
                if (targets[pos] == opt.ignore_index) continue;
                const T s = position_scale(gy, pos);
                for (std::size_t c = 0; c < C; ++c) {
                    const T q = (std::size_t(targets[pos]) == c ? 1 - eps : T(0)) + eps / T(C);
                    gz[base + c * inner] += s * (std::exp(log_prob[base + c * inner]) - q);
                }
            }
    }
};

template <std::size_t M, Real T, std::size_t R>
Var<T, M> cross_entropy_impl(const Var<T, R>& logits, const xt::xtensor<std::int64_t, R - 1>& targets,
                             const CrossEntropyOptions& opt, LossMode mode) {
    static_assert(R >= 1, "xgrad: cross_entropy needs logits of rank >= 1: (C), (N, C) or (N, C, d1, ...)");
    require_var(logits, "cross_entropy", "logits");
    if (opt.class_axis != 1 && opt.class_axis != -1)
        throw value_error("cross_entropy: class_axis must be 1 or -1, got " + std::to_string(opt.class_axis));
    const std::size_t class_axis = R == 1 || opt.class_axis == -1 ? R - 1 : 1;
    const auto& ls = logits.shape();
    std::array<std::size_t, R - 1> expected;  // logits' shape without the class axis
    for (std::size_t k = 0, j = 0; k < R; ++k)
        if (k != class_axis) expected[j++] = ls[k];
    if (!std::equal(expected.begin(), expected.end(), targets.shape().begin()))
        throw shape_error("cross_entropy: targets must have shape " + shape_str(expected) + " for logits " +
                          shape_str(ls) + " (class axis " + std::to_string(class_axis) + " removed), got " +
                          shape_str(targets.shape()));
    const AxisSplit split = split_at(ls, class_axis);
    check_class_targets("cross_entropy", targets.data(), targets.size(), split.extent, opt.ignore_index,
                        opt.label_smoothing);
    std::array<std::size_t, M> shape;
    if constexpr (M > 0) shape = expected;
    return make_op<CrossEntropyNode<T, R, M>>(shape, [&](auto& node) {
        node.split = split, node.opt = opt, node.mode = mode;
        node.targets.assign(targets.begin(), targets.end());
        node.forward();
    }, logits);
}

}  // namespace detail

// mse_loss(input, target, reduction = mean): mean or sum of (input − target)² -> rank 0.
// The target is a Var (a gradient flows to it too when it requires grad) or a constant xtensor;
// shapes must match exactly.
template <Real T, std::size_t N>
Var<T, 0> mse_loss(const Var<T, N>& input, const Var<T, N>& target, LossReduction reduction = LossReduction::mean) {
    return detail::mse_loss_impl<0>(input, target, detail::loss_mode(reduction));
}
template <Real T, std::size_t N>
Var<T, 0> mse_loss(const Var<T, N>& input, const xt::xtensor<T, N>& target,
                   LossReduction reduction = LossReduction::mean) {
    return detail::mse_loss_impl<0>(input, constant(target), detail::loss_mode(reduction));
}
// mse_loss(input, target, unreduced): (input − target)² elementwise, shape of input.
template <Real T, std::size_t N>
Var<T, N> mse_loss(const Var<T, N>& input, const Var<T, N>& target, unreduced_t) {
    return detail::mse_loss_impl<N>(input, target, detail::LossMode::none);
}
template <Real T, std::size_t N>
Var<T, N> mse_loss(const Var<T, N>& input, const xt::xtensor<T, N>& target, unreduced_t) {
    return detail::mse_loss_impl<N>(input, constant(target), detail::LossMode::none);
}
template <LazyExpression E, class Target, class... Args>
auto mse_loss(const E& input, const Target& target, Args... args) {
    return mse_loss(eval(input), target, args...);
}

// cross_entropy(logits, targets, options): torch.nn.functional.cross_entropy with class indices.
// logits (N, C) with targets (N); logits (N, C, d1, ...) with targets (N, d1, ...); logits (C)
// with a rank-0 target. Targets outside [0, C) other than ignore_index are a value_error.
// Mean over zero counted targets (all ignored) is NaN with a zero gradient, as torch.
template <Real T, std::size_t R>
Var<T, 0> cross_entropy(const Var<T, R>& logits, const xt::xtensor<std::int64_t, R - 1>& targets,
                        const CrossEntropyOptions& options = {}) {
    return detail::cross_entropy_impl<0>(logits, targets, options, detail::loss_mode(options.reduction));
}
// cross_entropy(logits, targets, unreduced, options): one loss per target, shape of targets
// (ignored targets give 0); options.reduction is not used.
template <Real T, std::size_t R>
Var<T, R - 1> cross_entropy(const Var<T, R>& logits, const xt::xtensor<std::int64_t, R - 1>& targets, unreduced_t,
                            const CrossEntropyOptions& options = {}) {
    return detail::cross_entropy_impl<R - 1>(logits, targets, options, detail::LossMode::none);
}
template <LazyExpression E, class... Args>
auto cross_entropy(const E& logits, const Args&... args) {
    return cross_entropy(eval(logits), args...);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): mse_loss and cross_entropy, reduced (rank-0
// result) for every rank and unreduced for ranks 2 to 4 (of rank 1 the unreduced one is the
// reduced one).
namespace xgrad {
#define XGRAD_DETAIL_REDUCED_LOSS_COMPILED(EXTERN, T, N)                                                          \
    EXTERN template Var<T, 0> detail::mse_loss_impl<0, T, N>(const Var<T, N>&, const Var<T, N>&, detail::LossMode); \
    EXTERN template Var<T, N> detail::mse_loss_impl<N, T, N>(const Var<T, N>&, const Var<T, N>&, detail::LossMode); \
    EXTERN template Var<T, 0> detail::cross_entropy_impl<0, T, N>(                                                \
        const Var<T, N>&, const xt::xtensor<std::int64_t, N - 1>&, const CrossEntropyOptions&, detail::LossMode);
#define XGRAD_DETAIL_UNREDUCED_CROSS_ENTROPY_COMPILED(EXTERN, T, N)                                                 \
    EXTERN template Var<T, N - 1> detail::cross_entropy_impl<N - 1, T, N>(                                           \
        const Var<T, N>&, const xt::xtensor<std::int64_t, N - 1>&, const CrossEntropyOptions&, detail::LossMode);
#define XGRAD_DETAIL_LOSSES_COMPILED(EXTERN, T)                                   \
    XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_REDUCED_LOSS_COMPILED, EXTERN, T)    \
    XGRAD_DETAIL_UNREDUCED_CROSS_ENTROPY_COMPILED(EXTERN, T, 2)                   \
    XGRAD_DETAIL_UNREDUCED_CROSS_ENTROPY_COMPILED(EXTERN, T, 3)                   \
    XGRAD_DETAIL_UNREDUCED_CROSS_ENTROPY_COMPILED(EXTERN, T, 4)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_LOSSES_COMPILED)
#undef XGRAD_DETAIL_LOSSES_COMPILED
#undef XGRAD_DETAIL_UNREDUCED_CROSS_ENTROPY_COMPILED
#undef XGRAD_DETAIL_REDUCED_LOSS_COMPILED
}  // namespace xgrad
