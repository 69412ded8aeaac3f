// linear_cross_entropy(x, W, targets): cross_entropy(linear(x, W), targets) with the classes on the
// last axis, as a language model's head and loss (nanoGPT's lm_head and F.cross_entropy), without
// keeping the logits and their gradient apart: a GPT-2 step's largest tensors (206 MB each at
// T = 1024). The loss is the end of a training step, so its gradient with respect to the logits is
// known as soon as their softmax is: forward turns the logits into it in place and keeps that, or,
// for many rows, makes the logits a chunk of rows at a time and keeps only what backward needs of
// them, dℓ/dX and dℓ/dW. Backward scales by the upstream gradient. The same three products as the
// unfused pair, in the same precision (Autocast included).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/grad_pool.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/ops/loss.hpp"

namespace xgrad {

struct LinearCrossEntropyOptions {
    std::int64_t ignore_index = -100;  // as CrossEntropyOptions
    double label_smoothing = 0;
    LossReduction reduction = LossReduction::mean;
    // 0: keep whichever is smaller, dℓ/dlogits or dℓ/dX and dℓ/dW, the latter in chunks of as many
    // rows as fit 2^24 logits (64 MB in float32), at least 32. Else: always in chunks of this many.
    std::size_t rows_per_chunk = 0;
};

namespace detail {

// ℓ = reduce over rows r of CE(z_r, y_r), z (rows, V) = X (rows, C) · Wᵀ (C, V). Per row:
// dℓ/dz_r = s · (softmax(z_r) − q_r), q_r = (1−ε)·one_hot(y_r) + ε/V, s = 1 (sum) or 1/counted (mean);
// dℓ/dX = dℓ/dz · W (rows, C) and dℓ/dW = (dℓ/dz)ᵀ · X (V, C). Forward keeps whichever is smaller:
// dℓ/dz itself (rows, V), the logits turned into it in place, for backward's two products (a short
// batch: GPT-2's 256 rows); or dℓ/dX and dℓ/dW ((rows + V) · C), taken a chunk of rows at a time
// (from about C rows on: GPT-2 at T = 1024).
template <Real T, std::size_t N>
class LinearCrossEntropyNode final : public OpNode<LinearCrossEntropyNode<T, N>, T, 0> {
public:
    Var<T, N> x;
    Var<T, 2> weight;
    std::vector<std::int64_t> targets;  // (rows)
    LinearCrossEntropyOptions opt;
    std::size_t rows = 0, in = 0, classes = 0, chunk = 0, counted = 0;
    bool keeps_grad_logits = false;      // dℓ/dz kept (backward multiplies), or dℓ/dX and dℓ/dW
    bool rounded = false;                // under Autocast (float only): bfloat16 operands
    std::vector<T> grad_logits;          // dℓ/dz (rows, V) for dℓ = 1, when kept
    std::vector<T> grad_x, grad_weight;  // dℓ/dX (rows, in), dℓ/dW (classes, in) for dℓ = 1, when kept
    std::vector<T> row_loss;             // (rows)
    struct Rounded {                     // W and X rounded to bfloat16 in forward
        kernels::RoundedMatrix weight, x;
    };
    std::conditional_t<std::is_same_v<T, float>, Rounded, std::monostate> rounded_operands;

    const char* op_name() const override { return "linear_cross_entropy"; }
    auto inputs() { return std::tie(x, weight); }

    void forward() {
        const bool need_x = this->requires_grad && x.requires_grad(),
                   need_weight = this->requires_grad && weight.requires_grad();
        keeps_grad_logits = (need_x || need_weight) && opt.rows_per_chunk == 0 && rows * classes <= (rows + classes) * in;
        row_loss.resize(rows);
        counted = std::size_t(std::count_if(targets.begin(), targets.end(),
                                            [&](std::int64_t t) { return t != opt.ignore_index; }));
        const T scale = opt.reduction == LossReduction::mean ? T(1) / T(counted) : T(1);
        rounded = std::is_same_v<T, float> && matmul_precision() == MatmulPrecision::bfloat16;
        if constexpr (std::is_same_v<T, float>)
            if (rounded) rounded_operands.weight.round(weight.value().data(), false, classes, in, in);
        // what this step does not keep goes, should an earlier step on this node have kept it
        const auto release = [](std::vector<T>& v) { std::vector<T>().swap(v); };
        if (!keeps_grad_logits) release(grad_logits);
        if (keeps_grad_logits || !need_x) release(grad_x);
        if (keeps_grad_logits || !need_weight) release(grad_weight);
        if (keeps_grad_logits) {  // all rows at once: Z (rows, V) = X · Wᵀ becomes dℓ/dZ
            grad_logits.resize(rows * classes);
            product(Step::logits, rows, x.value().data(), grad_logits.data(), nullptr, T(0));
            losses_and_grads(0, rows, grad_logits.data(), scale);
        } else {
            if (need_x) grad_x.resize(rows * in);
            if (need_weight) grad_weight.resize(classes * in);
            if (need_weight && rows == 0) std::fill(grad_weight.begin(), grad_weight.end(), T(0));  // no chunk writes it
            PooledScratch<typename xt::xtensor<T, 1>::storage_type> logits(std::min(chunk, rows) * classes);
            for (std::size_t r0 = 0; r0 < rows; r0 += chunk) {
                const std::size_t r = std::min(chunk, rows - r0);
                const T* xc = x.value().data() + r0 * in;
                T* z = logits.data();
                product(Step::logits, r, xc, z, nullptr, T(0));  // Z (r, V) = Xc · Wᵀ
                losses_and_grads(r0, r, z, scale);                      // Z becomes dℓ/dZ
                if (need_x) product(Step::grad_x, r, xc, z, grad_x.data() + r0 * in, T(0));
                if (need_weight) product(Step::grad_weight, r, xc, z, grad_weight.data(), r0 ? T(1) : T(0));
            }
        }
        T total = 0;
        for (const T l : row_loss) total += l;  // in row order, whatever the threads
        this->value.data()[0] = opt.reduction == LossReduction::mean ? total / T(counted) : total;  // 0/0: NaN
    }

    void backward() override {
        // dX = g · dℓ/dX + beta · dX, dW = g · dℓ/dW + beta · dW, g = d(output)/dℓ
        const T g = this->grad_buffer().data()[0];
        if (keeps_grad_logits) {
            // g · dℓ/dz, in a copy when g ≠ 1 (the kept one stays for another backward): the products
            // keep alpha 1, as oneDNN makes a primitive for every alpha it is given
            T* dz = grad_logits.data();
            std::optional<PooledScratch<typename xt::xtensor<T, 1>::storage_type>> scaled;
            if (g != T(1)) {
                T* out = scaled.emplace(grad_logits.size()).data();
                parallel_for(grad_logits.size(), double(grad_logits.size()), [&](std::size_t begin, std::size_t end) {
                    for (std::size_t i = begin; i < end; ++i) out[i] = g * dz[i];
                });
                dz = out;
            }
            if (x.requires_grad()) {
                const auto [gx, beta] = x.node()->grad_target();
                product(Step::grad_x, rows, x.value().data(), dz, gx, beta);
            }
            if (weight.requires_grad()) {
                const auto [gw, beta] = weight.node()->grad_target();
                product(Step::grad_weight, rows, x.value().data(), dz, gw, beta);
            }
            return;
        }
        const auto accumulate = [&](auto& input, const std::vector<T>& kept) {
            if (!input.requires_grad()) return;
            const auto [out, beta] = input.node()->grad_target();
            parallel_for(kept.size(), 2.0 * double(kept.size()), [&](std::size_t begin, std::size_t end) {
                for (std::size_t i = begin; i < end; ++i) out[i] = g * kept[i] + (beta == T(0) ? T(0) : out[i]);
            });
        };
        accumulate(x, grad_x);
        accumulate(weight, grad_weight);
    }

private:
    enum class Step { logits, grad_x, grad_weight };

    // One of the three products of r rows from xc, into c (beta 1 accumulates):
    //   logits       Z (r, V) = Xc (r, in) · Wᵀ                 (c is z)
    //   grad_x       dXc (r, in) = dZ (r, V) · W (V, in) + beta · dXc
    //   grad_weight  dW (V, in) = dZᵀ (V, r) · Xc (r, in) + beta · dW
    // in T, or under Autocast on operands rounded to bfloat16: W once per forward, Xc with its logits,
    // dZ into a buffer of this thread (grown once, reused by every product).
    void product(Step step, std::size_t r, const T* xc, T* z, T* c, T beta) {
        using kernels::Op;
        const T* w = weight.value().data();
        if constexpr (std::is_same_v<T, float>) {
            if (rounded) {
                Rounded& o = rounded_operands;
                thread_local kernels::RoundedMatrix dz;
                if (step == Step::logits) {
                    o.x.round(xc, false, r, in, in);
                    return kernels::gemm_rounded(o.x, o.weight, true, 1.0f, 0.0f, z, classes);
                }
                if (step == Step::grad_x) {
                    dz.round(z, false, r, classes, classes);
                    return kernels::gemm_rounded(dz, o.weight, false, 1.0f, beta, c, in);
                }
                dz.round(z, true, classes, r, classes);
                return kernels::gemm_rounded(dz, o.x, false, 1.0f, beta, c, in);
            }
        }
        if (step == Step::logits) kernels::gemm(Op::none, Op::trans, r, classes, in, T(1), xc, w, T(0), z);
        else if (step == Step::grad_x) kernels::gemm(Op::none, Op::none, r, in, classes, T(1), z, w, beta, c);
        else kernels::gemm(Op::trans, Op::none, classes, in, r, T(1), z, xc, beta, c);
    }

    // Rows [r0, r0 + r) of the loss from their logits z (r, V), which become dℓ/dz in place.
    void losses_and_grads(std::size_t r0, std::size_t r, T* z, T scale) {
        const T eps = static_cast<T>(opt.label_smoothing);
        parallel_for(r, 16.0 * double(r) * double(classes), [&](std::size_t first, std::size_t last) {
            for (std::size_t i = first; i < last; ++i) {
                T* row = z + i * classes;
                const std::int64_t y = targets[r0 + i];
                if (y == opt.ignore_index) {  // no loss, no gradient
                    row_loss[r0 + i] = T(0);
                    std::fill(row, row + classes, T(0));
                    continue;
                }
                T lse;  // row becomes log p, then its gradient
                kernels::softmax_rows<true>(row, 1, classes, classes, kernels::EmptyLine::nan, kernels::NoMasks<T>{},
                                            &lse);
                row_loss[r0 + i] = cross_entropy_row_loss(row, classes, y, eps);
                cross_entropy_row_grad(row, T(0), classes, y, scale, eps, row, T(0));
            }
        });
    }
};

}  // namespace detail

// linear_cross_entropy(x (..., C), W (V, C), targets (...), options): the mean (or sum) over the
// targets other than ignore_index of cross_entropy(x · Wᵀ, targets), the V classes last, as
// F.cross_entropy(F.linear(x, W).view(-1, V), targets.view(-1)) in PyTorch. No bias; no unreduced
// form (it would need the logits: cross_entropy(linear(x, W), ...) gives it).
template <Real T, std::size_t N>
Var<T, 0> linear_cross_entropy(const Var<T, N>& x, const Var<T, 2>& weight,
                               const xt::xtensor<std::int64_t, N - 1>& targets,
                               const LinearCrossEntropyOptions& options = {}) {
    static_assert(N >= 1, "xgrad: linear_cross_entropy needs x of rank >= 1: (..., C)");
    require_var(x, "linear_cross_entropy", "x");
    require_var(weight, "linear_cross_entropy", "weight");
    const std::size_t in = x.shape(N - 1), classes = weight.shape(0);
    if (weight.shape(1) != in)
        throw shape_error("linear_cross_entropy: weight " + shape_str(weight.shape()) + " does not fit x " +
                          shape_str(x.shape()) + ": it needs (classes, " + std::to_string(in) + ")");
    if (!std::equal(targets.shape().begin(), targets.shape().end(), x.shape().begin()))
        throw shape_error("linear_cross_entropy: targets have shape " + shape_str(targets.shape()) + " but x " +
                          shape_str(x.shape()) + " needs its shape without the last axis");
    detail::check_class_targets("linear_cross_entropy", targets.data(), targets.size(), classes, options.ignore_index,
                                options.label_smoothing);
    const std::size_t rows = targets.size();  // x's leading dimensions, whatever C (even 0)
    const std::size_t chunk =
        options.rows_per_chunk ? options.rows_per_chunk : std::max<std::size_t>(32, (std::size_t(1) << 24) / std::max<std::size_t>(classes, 1));
    return make_op<detail::LinearCrossEntropyNode<T, N>>(std::array<std::size_t, 0>{}, [&](auto& node) {
        node.targets.assign(targets.begin(), targets.end());
        node.opt = options, node.rows = rows, node.in = in, node.classes = classes, node.chunk = chunk;
        node.forward();
    }, x, weight);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp), in the unit of the models that use it.
namespace xgrad {
#define XGRAD_DETAIL_LINEAR_CROSS_ENTROPY_COMPILED(EXTERN, T)                                                      \
    EXTERN template Var<T, 0> linear_cross_entropy<T, 3>(const Var<T, 3>&, const Var<T, 2>&,                        \
                                                         const xt::xtensor<std::int64_t, 2>&,                         \
                                                         const LinearCrossEntropyOptions&);
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_LINEAR_CROSS_ENTROPY_COMPILED)
#undef XGRAD_DETAIL_LINEAR_CROSS_ENTROPY_COMPILED
}  // namespace xgrad
