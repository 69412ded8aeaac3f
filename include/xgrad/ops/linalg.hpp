// Linear algebra: matmul (2-D, batched, folded) and linear (PyTorch's F.linear), all through GEMM.
// Backward writes the input gradients through GEMM's beta (grad_target: 0 on a gradient's first
// write in a pass, 1 after); transposes are BLAS flags.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <type_traits>
#include <variant>
#include <cstddef>
#include <optional>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad {

namespace detail {

// Product of shape[from, to).
template <class S>
std::size_t extent_product(const S& shape, std::size_t from, std::size_t to) {
    std::size_t p = 1;
    for (std::size_t k = from; k < to; ++k) p *= shape[k];
    return p;
}

// y (B, M, N) = a (B, M, K) · b (B, K, N): B GEMMs on contiguous slices. A folded matmul
// (a rank > 2, b rank 2) is one GEMM: B = 1 and M = every row of a.
template <Real T, std::size_t NA, std::size_t NB>
class MatmulNode final : public OpNode<MatmulNode<T, NA, NB>, T, NA> {
public:
    Var<T, NA> a;  // a and b are held only when this node requires grad
    Var<T, NB> b;
    std::size_t batches = 1, m = 0, k = 0, n = 0;

    const char* op_name() const override { return "matmul"; }
    auto inputs() { return std::tie(a, b); }

    void forward() {
        const T *pa = a.value().data(), *pb = b.value().data();
        T* py = this->value.data();
        // Y_i (M,N) = A_i (M,K) · B_i (K,N)
        for (std::size_t i = 0; i < batches; ++i)
            kernels::gemm(kernels::Op::none, kernels::Op::none, m, n, k, T(1), pa + i * m * k, pb + i * k * n, T(0),
                          py + i * m * n);
    }

    void backward() override {
        const T* gy = this->grad_buffer().data();
        const T* pa = a.value().data();
        const T* pb = b.value().data();
        // each product writes its whole slice of the gradient: beta 0 overwrites on first touch
        if (a.requires_grad()) {
            const auto [ga, beta] = a.node()->grad_target();
            // dA_i (M,K) = dY_i (M,N) · B_iᵀ (N,K) + beta · dA_i
            for (std::size_t i = 0; i < batches; ++i)
                kernels::gemm(kernels::Op::none, kernels::Op::trans, m, k, n, T(1), gy + i * m * n, pb + i * k * n, beta,
                              ga + i * m * k);
        }
        if (b.requires_grad()) {
            const auto [gb, beta] = b.node()->grad_target();
            // dB_i (K,N) = A_iᵀ (K,M) · dY_i (M,N) + beta · dB_i   (folded: sums over all rows of a)
            for (std::size_t i = 0; i < batches; ++i)
                kernels::gemm(kernels::Op::trans, kernels::Op::none, k, n, m, T(1), pa + i * m * k, gy + i * m * n, beta,
                              gb + i * k * n);
        }
    }
};

template <Real T, std::size_t NA, std::size_t NB>
Var<T, NA> matmul_vars(const Var<T, NA>& a, const Var<T, NB>& b) {
    require_var(a, "matmul", "a");
    require_var(b, "matmul", "b");
    const auto& sa = a.shape();
    const auto& sb = b.shape();
    if (sa[NA - 1] != sb[NB - 2])
        throw shape_error("matmul: inner dimensions differ: a " + shape_str(sa) + " and b " + shape_str(sb));
    if constexpr (NB == NA && NA > 2)
        if (!std::equal(sa.begin(), sa.end() - 2, sb.begin()))
            throw shape_error("matmul: batch dimensions differ: a " + shape_str(sa) + " and b " + shape_str(sb));

    std::array<std::size_t, NA> shape;
    std::copy(sa.begin(), sa.end(), shape.begin());
    shape[NA - 1] = sb[NB - 1];
    return make_op<MatmulNode<T, NA, NB>>(shape, [&](auto& node) {
        node.k = sa[NA - 1];
        node.n = sb[NB - 1];
        if constexpr (NB == NA) {
            node.batches = extent_product(sa, 0, NA - 2);
            node.m = sa[NA - 2];
        } else {  // fold every leading dimension of a into the rows of one GEMM
            node.batches = 1;
            node.m = extent_product(sa, 0, NA - 1);
        }
        node.forward();
    }, a, b);
}

// sum (n) = Σ_r y (rows,n) + beta · sum, each column summed over the rows in order, in registers:
// blocks of 4 vectors of columns go down all the rows before they are stored, on xgrad's threads
// (a column's sum is the same whichever thread takes its block; work: about 0.08 ns an element).
template <Real T>
void column_sums(const T* y, std::size_t rows, std::size_t n, T beta, T* sum) {
    using V = simd::Vec<T>;
    constexpr std::size_t W = simd::lanes<T>, block = 4;
    const std::size_t blocks = (n + block * W - 1) / (block * W);
    parallel_for(blocks, 8.0 * double(rows) * double(n), [&](std::size_t first, std::size_t last) {
        for (std::size_t j0 = first * block * W; j0 < std::min(n, last * block * W); j0 += block * W) {
            std::array<V, block> acc;
            const auto count = [&](std::size_t v) { return std::min(W, n - std::min(n, j0 + v * W)); };
            for (std::size_t v = 0; v < block; ++v)
                acc[v] = beta == T(0) || count(v) == 0 ? V(T(0)) : simd::load_part(sum + j0 + v * W, count(v));
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t v = 0; v < block; ++v)
                    if (count(v) > 0) acc[v] += simd::load_part(y + r * n + j0 + v * W, count(v));
            for (std::size_t v = 0; v < block; ++v)
                if (count(v) > 0) simd::store_part(sum + j0 + v * W, acc[v], count(v));
        }
    });
}

}  // namespace detail

// The activation linear(x, W, b, activation) applies to its output in the same node.
// gelu is the erf form (F.gelu), gelu_tanh the tanh form (F.gelu(approximate='tanh'), GPT-2's).
enum class LinearActivation { none, relu, gelu, gelu_tanh };

namespace detail {

// y (rows, out) = act(x (rows, in) · Wᵀ + b), rows = all leading dimensions of x folded together;
// act is none, relu, gelu or gelu_tanh (relu_op, gelu_op, gelu_tanh_op of ops/elementwise.hpp),
// applied in place to the GEMM's output. Or, without act, y = r + x · Wᵀ + b with a residual r of
// y's shape (linear_add): the GEMM accumulates onto r, and no node holds x · Wᵀ + b apart.
template <Real T, std::size_t N>
class LinearNode final : public OpNode<LinearNode<T, N>, T, N> {
public:
    Var<T, N> x;  // x, weight and bias are held only when this node requires grad
    Var<T, 2> weight;
    Var<T, 1> bias;  // empty when there is no bias
    Var<T, N> residual;  // empty when there is none (linear_add)
    std::size_t rows = 0, in = 0, out = 0;
    LinearActivation activation = LinearActivation::none;
    std::vector<T> pre;  // gelu forms: the GEMM's output before the activation (relu's derivative reads y)
    // Under MatmulPrecision::bfloat16 (float only), when the node will run backward: X and W rounded
    // once in forward (kernels::RoundedMatrix, kept with the node as the tape reuses it), read again
    // by backward with dY's rounded copies; `rounded` says forward made them.
    struct Rounded {
        kernels::RoundedMatrix x, weight;
    };
    std::conditional_t<std::is_same_v<T, float>, Rounded, std::monostate> rounded_operands;
    bool rounded = false;

    const char* op_name() const override {
        return activation == LinearActivation::relu ? "linear_relu"
               : activation == LinearActivation::gelu      ? "linear_gelu"
               : activation == LinearActivation::gelu_tanh ? "linear_gelu_tanh"
                                                           : "linear";
    }
    auto inputs() { return std::tie(x, weight, bias, residual); }

    // f(op) with the elementwise op of this node's GELU form.
    template <class F>
    void with_gelu(F&& f) const {
        if (activation == LinearActivation::gelu_tanh) f(gelu_tanh_op{});
        else f(gelu_op{});
    }
    // out[i] = g(a[i], b[i]) for i in [begin, end), a SIMD vector at a time (the last one partial, so
    // every element takes the same path); g takes two batches.
    template <class G>
    static void vectorized(const T* a, const T* b, T* out, std::size_t begin, std::size_t end, G g) {
        constexpr std::size_t W = simd::lanes<T>;
        std::size_t i = begin;
        for (; i + W <= end; i += W)
            g(simd::Vec<T>::load_unaligned(a + i), simd::Vec<T>::load_unaligned(b + i)).store_unaligned(out + i);
        if (i < end) simd::store_part(out + i, g(simd::load_part(a + i, end - i), simd::load_part(b + i, end - i)), end - i);
    }

    void forward() {
        // Y (rows,out) = X (rows,in) · Wᵀ (in,out) + b (out) on every row (no bias: null) + beta · R
        const T* b = bias ? bias.value().data() : nullptr;
        const T beta = residual ? T(1) : T(0);
        const std::size_t n = this->value.size();
        const bool gelu = activation == LinearActivation::gelu || activation == LinearActivation::gelu_tanh;
        if (gelu) pre.resize(n);  // once: the tape reuses the node
        T* product = gelu ? pre.data() : this->value.data();  // where the GEMM writes
        if (residual) std::copy(residual.value().begin(), residual.value().end(), product);
        // a node no backward will visit (NoGrad, inference) rounds into kernels::gemm's per-thread
        // buffers instead of allocating copies of its own on every call (token-by-token generation)
        rounded = std::is_same_v<T, float> && matmul_precision() == MatmulPrecision::bfloat16 && this->requires_grad;
        if constexpr (std::is_same_v<T, float>) {
            if (rounded) {
                Rounded& r = rounded_operands;
                r.x.round(x.value().data(), false, rows, in, in);
                r.weight.round(weight.value().data(), false, out, in, in);
                kernels::gemm_rounded(r.x, r.weight, true, 1.0f, beta, product, out, b);
            }
        }
        if (!rounded)
            kernels::gemm(kernels::Op::none, kernels::Op::trans, rows, out, in, T(1), x.value().data(),
                          weight.value().data(), beta, product, b);
        T* y = this->value.data();
        if (activation == LinearActivation::relu) {  // Y = relu(Y)
            parallel_for(n, 2.0 * double(n), [&](std::size_t begin, std::size_t end) {
                for (std::size_t i = begin; i < end; ++i) y[i] = relu_op{}.f(y[i]);
            });
        } else if (gelu) {  // Y = gelu(pre)
            with_gelu([&](auto op) {
                parallel_for(n, 30.0 * double(n), [&](std::size_t begin, std::size_t end) {
                    vectorized(pre.data(), pre.data(), y, begin, end, [&](auto p, auto) { return op.f(p); });
                });
            });
        }
    }

    void backward() override {
        // each writes its whole gradient: beta 0 overwrites on first touch in a pass, 1 accumulates
        const T* gy = this->grad_buffer().data();
        std::optional<detail::PooledScratch<typename xt::xtensor<T, 1>::storage_type>> pre_grad;  // for this backward
        if (activation != LinearActivation::none) {
            // dPre (rows,out) = dY (rows,out) ⊙ act'(pre); relu' from y: y > 0 exactly where pre > 0
            const std::size_t n = this->value.size();
            const T* y = this->value.data();
            T* gp = pre_grad.emplace(n).data();  // what the GEMMs read
            if (activation == LinearActivation::relu)
                parallel_for(n, 2.0 * double(n), [&](std::size_t begin, std::size_t end) {
                    for (std::size_t i = begin; i < end; ++i) gp[i] = gy[i] * relu_op{}.d(y[i]);
                });
            else
                with_gelu([&](auto op) {
                    parallel_for(n, 30.0 * double(n), [&](std::size_t begin, std::size_t end) {
                        vectorized(gy, pre.data(), gp, begin, end, [&](auto g, auto p) { return g * op.d(p); });
                    });
                });
            gy = gp;
        }
        if constexpr (std::is_same_v<T, float>)
            if (rounded) return backward_rounded(gy);
        if (x.requires_grad()) {  // dX (rows,in) = dY (rows,out) · W (out,in) + beta · dX
            const auto [gx, beta] = x.node()->grad_target();
            kernels::gemm(kernels::Op::none, kernels::Op::none, rows, in, out, T(1), gy, weight.value().data(), beta, gx);
        }
        if (weight.requires_grad()) {  // dW (out,in) = dYᵀ (out,rows) · X (rows,in) + beta · dW
            const auto [gw, beta] = weight.node()->grad_target();
            kernels::gemm(kernels::Op::trans, kernels::Op::none, out, in, rows, T(1), gy, x.value().data(), beta, gw);
        }
        bias_backward(gy);
    }

    // The same two products on the rounded X and W of forward and dY rounded here (float only).
    void backward_rounded(const T* gy) {
        Rounded& r = rounded_operands;
        thread_local kernels::RoundedMatrix dy, dy_t;  // dY's copies live only in this backward
        if (x.requires_grad()) {  // dX (rows,in) = dY (rows,out) · W (out,in) + beta · dX
            const auto [gx, beta] = x.node()->grad_target();
            dy.round(gy, false, rows, out, out);
            kernels::gemm_rounded(dy, r.weight, false, 1.0f, beta, gx, in);
        }
        if (weight.requires_grad()) {  // dW (out,in) = dYᵀ (out,rows) · X (rows,in) + beta · dW
            const auto [gw, beta] = weight.node()->grad_target();
            dy_t.round(gy, true, out, rows, out);
            kernels::gemm_rounded(dy_t, r.x, false, 1.0f, beta, gw, in);
        }
        bias_backward(gy);
    }

    // and the residual's: dR (rows,out) = dY + beta · dR
    void bias_backward(const T* gy) {
        if (bias && bias.requires_grad()) {  // db (out) = Σ_rows dY (rows,out) + beta · db
            const auto [gb, beta] = bias.node()->grad_target();
            column_sums(gy, rows, out, beta, gb);
        }
        if (residual && residual.requires_grad()) {
            const auto [gr, beta] = residual.node()->grad_target();
            const std::size_t n = this->value.size();
            parallel_for(n, double(n), [&](std::size_t begin, std::size_t end) {  // beta 0: gr is stale, not read
                if (beta == T(0)) std::copy(gy + begin, gy + end, gr + begin);
                else
                    for (std::size_t i = begin; i < end; ++i) gr[i] += gy[i];
            });
        }
    }
};

template <Real T, std::size_t N>
Var<T, N> linear_vars(const Var<T, N>& x, const Var<T, 2>& weight, const Var<T, 1>* bias,
                      LinearActivation activation = LinearActivation::none, const Var<T, N>* residual = nullptr) {
    require_var(x, "linear", "x");
    require_var(weight, "linear", "weight");
    if (bias && !*bias) bias = nullptr;  // an empty bias Var means no bias
    const auto& sx = x.shape();
    const auto& sw = weight.shape();
    if (sw[1] != sx[N - 1])
        throw shape_error("linear: weight has shape " + shape_str(sw) + " but x has shape " + shape_str(sx) +
                          ": expected weight (out, " + std::to_string(sx[N - 1]) + ")");
    if (bias && bias->shape()[0] != sw[0])
        throw shape_error("linear: bias has shape " + shape_str(bias->shape()) + " but weight has shape " +
                          shape_str(sw) + ": expected bias (" + std::to_string(sw[0]) + ",)");

    std::array<std::size_t, N> shape;
    std::copy(sx.begin(), sx.end(), shape.begin());
    shape[N - 1] = sw[0];
    if (residual) require_var(*residual, "linear_add", "residual");
    if (residual && !std::ranges::equal(residual->shape(), shape))
        throw shape_error("linear_add: residual has shape " + shape_str(residual->shape()) + " but x · Wᵀ has shape " +
                          shape_str(shape));
    return make_op<LinearNode<T, N>>(shape, [&](auto& node) {
        node.rows = extent_product(sx, 0, N - 1);
        node.in = sx[N - 1];
        node.out = sw[0];
        node.activation = activation;
        node.forward();
    }, x, weight, bias ? *bias : Var<T, 1>{}, residual ? *residual : Var<T, N>{});
}

}  // namespace detail

// matmul(a, b):
//   a (M,K)     · b (K,N)     -> (M,N)
//   a (...,M,K) · b (...,K,N) -> (...,M,N)   leading dimensions equal (no broadcasting)
//   a (...,M,K) · b (K,N)     -> (...,M,N)   leading dimensions of a folded into one GEMM
template <Real TA, std::size_t NA, Real TB, std::size_t NB>
auto matmul(const Var<TA, NA>& a, const Var<TB, NB>& b) {
    static_assert(std::same_as<TA, TB>, "xgrad: matmul cannot mix float and double operands");
    constexpr bool ranks_fit = NA >= 2 && (NB == NA || NB == 2);
    static_assert(ranks_fit,
                  "xgrad: matmul needs operands of equal rank (>= 2), or a rank-2 right operand with a "
                  "higher-rank left one");
    if constexpr (ranks_fit && std::same_as<TA, TB>) return detail::matmul_vars(a, b);
}
// linear(x, W, b) = x · Wᵀ + b, as PyTorch's F.linear: x (..., in) of rank >= 1, W (out, in),
// b (out) -> (..., out). One GEMM over all leading dimensions of x.
template <Real T, std::size_t N, Real TW, std::size_t NW, Real TB, std::size_t NB>
auto linear(const Var<T, N>& x, const Var<TW, NW>& weight, const Var<TB, NB>& bias) {
    constexpr bool types_fit = std::same_as<TW, T> && std::same_as<TB, T>;
    constexpr bool ranks_fit = N >= 1 && NW == 2 && NB == 1;
    static_assert(types_fit, "xgrad: linear cannot mix float and double operands");
    static_assert(ranks_fit, "xgrad: linear needs x of rank >= 1, weight (out, in) of rank 2 and bias (out) of rank 1");
    if constexpr (types_fit && ranks_fit) return detail::linear_vars(x, weight, &bias);
}
// linear(x, W, b, activation) = activation(x · Wᵀ + b) in one node (relu or a gelu applied to the
// GEMM's output in place; a feed-forward block's first layer); LinearActivation::none: linear(x, W, b).
// An empty bias means none.
template <Real T, std::size_t N>
Var<T, N> linear(const Var<T, N>& x, const Var<T, 2>& weight, const Var<T, 1>& bias, LinearActivation activation) {
    static_assert(N >= 1, "xgrad: linear needs x of rank >= 1");
    return detail::linear_vars(x, weight, &bias, activation);
}
// linear_add(r, x, W, b) = r + (x · Wᵀ + b) in one node: a residual connection after a projection,
// without a node for the projection alone (torch.addmm's input + mat1 · mat2). r has the output's shape.
template <Real T, std::size_t N>
Var<T, N> linear_add(const Var<T, N>& residual, const Var<T, N>& x, const Var<T, 2>& weight, const Var<T, 1>& bias) {
    static_assert(N >= 1, "xgrad: linear_add needs x of rank >= 1");
    return detail::linear_vars(x, weight, &bias, LinearActivation::none, &residual);
}
// linear(x, W) = x · Wᵀ: x (..., in), W (out, in) -> (..., out).
template <Real T, std::size_t N, Real TW, std::size_t NW>
auto linear(const Var<T, N>& x, const Var<TW, NW>& weight) {
    static_assert(std::same_as<TW, T>, "xgrad: linear cannot mix float and double operands");
    static_assert(N >= 1 && NW == 2, "xgrad: linear needs x of rank >= 1 and weight (out, in) of rank 2");
    if constexpr (std::same_as<TW, T> && N >= 1 && NW == 2) return detail::linear_vars<T, N>(x, weight, nullptr);
}

// Operands that are elementwise expressions are materialized first (one node each).
template <Expression A, Expression B>
    requires(LazyExpression<A> || LazyExpression<B>)
auto matmul(const A& a, const B& b) {
    return matmul(eval(a), eval(b));
}
template <Expression X, Expression W, Expression... B>
    requires(sizeof...(B) <= 1 && (LazyExpression<X> || LazyExpression<W> || (LazyExpression<B> || ...)))
auto linear(const X& x, const W& weight, const B&... bias) {
    return linear(eval(x), eval(weight), eval(bias)...);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): linear of every rank, matmul of the ranks
// attention and the Transformers use.
namespace xgrad {
#define XGRAD_DETAIL_LINEAR_COMPILED(EXTERN, T, N)                                                          \
    EXTERN template Var<T, N> detail::linear_vars<T, N>(const Var<T, N>&, const Var<T, 2>&, const Var<T, 1>*, \
                                                        LinearActivation, const Var<T, N>*);
#define XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, NA, NB) \
    EXTERN template Var<T, NA> detail::matmul_vars<T, NA, NB>(const Var<T, NA>&, const Var<T, NB>&);
#define XGRAD_DETAIL_LINALG_COMPILED(EXTERN, T)                          \
    XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_LINEAR_COMPILED, EXTERN, T) \
    XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, 2, 2)                        \
    XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, 3, 3)                        \
    XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, 4, 4)                        \
    XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, 3, 2)                        \
    XGRAD_DETAIL_MATMUL_COMPILED(EXTERN, T, 4, 2)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_LINALG_COMPILED)
#undef XGRAD_DETAIL_LINALG_COMPILED
#undef XGRAD_DETAIL_MATMUL_COMPILED
#undef XGRAD_DETAIL_LINEAR_COMPILED
}  // namespace xgrad
