// Elementwise ops: each is one line giving f(x) and its derivative (unary: d, binary: da, db).
// They compose lazily into expressions (core/expr.hpp) and fuse into one node when materialized.
#pragma once
#include <cmath>
#include <concepts>
#include <numbers>

#include <xtensor/xoperation.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/expr.hpp"
#include "xgrad/ops/elementwise_math.hpp"

namespace xgrad {

namespace detail {
template <Expression A, class S>
Const<typename A::value_type> as_const(S s) {
    return {static_cast<typename A::value_type>(s)};
}
// An operand joining an expression: an empty Var is a value_error naming the op (its shape is unknown).
template <Expression A>
const A& operand(const A& a, const char* op, const char* which) {
    if constexpr (requires { a.node(); }) require_var(a, op, which);
    return a;
}
}  // namespace detail

// A SIMD batch (xsimd::batch<float or double>): the vector overloads of f and d below take one.
template <class X>
concept SimdBatch = !std::floating_point<X> && requires { typename X::value_type; X::size; };

// f and d on a float or double (ARG: std::floating_point); the ops declared with
// XGRAD_BATCH_UNARY_OP or XGRAD_VECTOR_UNARY_OP take a SIMD batch too (their F and D are written
// for both: ops/elementwise_math.hpp). An expression whose ops all take batches runs a vector at
// a time when one of them is a VECTOR op (VECTORIZE: a libm call or a branch, which g++ does not
// vectorize itself; core/expr.hpp); linear's GELU runs them so too.
#define XGRAD_UNARY_OP_OF(ARG, VECTORIZE, NAME, F, D)                \
    struct NAME##_op {                                               \
        static constexpr const char* name = #NAME;                   \
        static constexpr bool vectorize = VECTORIZE;                 \
        template <class X>                                           \
            requires(ARG<X>)                                         \
        X f(X x) const {                                             \
            return F;                                                \
        }                                                            \
        template <class X>                                           \
            requires(ARG<X>)                                         \
        X d([[maybe_unused]] X x) const {                            \
            return D;                                                \
        }                                                            \
    };                                                               \
    template <Expression A>                                          \
    Expr<NAME##_op, A> NAME(const A& a) {                            \
        return make_expr(NAME##_op{}, detail::operand(a, #NAME, "operand")); \
    }
template <class X>
concept ScalarOrBatch = std::floating_point<X> || SimdBatch<X>;
#define XGRAD_UNARY_OP(NAME, F, D) XGRAD_UNARY_OP_OF(std::floating_point, false, NAME, F, D)
#define XGRAD_BATCH_UNARY_OP(NAME, F, D) XGRAD_UNARY_OP_OF(ScalarOrBatch, false, NAME, F, D)
#define XGRAD_VECTOR_UNARY_OP(NAME, F, D) XGRAD_UNARY_OP_OF(ScalarOrBatch, true, NAME, F, D)

#define XGRAD_BINARY_OP(NAME, SYMBOL, F, DA, DB)                                 \
    struct NAME##_op {                                                           \
        static constexpr const char* name = #NAME;                               \
        template <ScalarOrBatch X>                                               \
        X f([[maybe_unused]] X a, [[maybe_unused]] X b) const {                                                  \
            return F;                                                            \
        }                                                                        \
        template <ScalarOrBatch X>                                               \
        X da([[maybe_unused]] X a, [[maybe_unused]] X b) const {                                                 \
            return DA;                                                           \
        }                                                                        \
        template <ScalarOrBatch X>                                               \
        X db([[maybe_unused]] X a, [[maybe_unused]] X b) const {                                                 \
            return DB;                                                           \
        }                                                                        \
    };                                                                           \
    template <Expression A, Expression B>                                        \
    Expr<NAME##_op, A, B> operator SYMBOL(const A& a, const B& b) {              \
        return make_expr(NAME##_op{}, detail::operand(a, #NAME, "left operand"),   \
                         detail::operand(b, #NAME, "right operand"));            \
    }                                                                            \
    template <Expression A, class S>                                             \
        requires std::is_arithmetic_v<S>                                         \
    auto operator SYMBOL(const A& a, S s) {                                      \
        return make_expr(NAME##_op{}, detail::operand(a, #NAME, "left operand"), detail::as_const<A>(s)); \
    }                                                                            \
    template <Expression B, class S>                                             \
        requires std::is_arithmetic_v<S>                                         \
    auto operator SYMBOL(S s, const B& b) {                                      \
        return make_expr(NAME##_op{}, detail::as_const<B>(s), detail::operand(b, #NAME, "right operand")); \
    }

//              name     symbol  f(a, b)   df/da     df/db
// (lit<X>(v): the constant v as a float, a double or a batch of them)
XGRAD_BINARY_OP(add,     +,      a + b,    detail::lit<X>(1),   detail::lit<X>(1))
XGRAD_BINARY_OP(sub,     -,      a - b,    detail::lit<X>(1),   detail::lit<X>(-1))
XGRAD_BINARY_OP(mul,     *,      a * b,    b,                   a)
XGRAD_BINARY_OP(div,     /,      a / b,    detail::lit<X>(1) / b, -(a / b) / b)

//                    name     f(x)                               df/dx
XGRAD_BATCH_UNARY_OP( neg,     -x,                                detail::lit<X>(-1))
XGRAD_VECTOR_UNARY_OP(exp,     detail::exp_of(x),                 detail::exp_of(x))
XGRAD_VECTOR_UNARY_OP(log,     detail::log_of(x),                 detail::lit<X>(1) / x)
XGRAD_VECTOR_UNARY_OP(sqrt,    detail::sqrt_of(x),                detail::lit<X>(0.5) / detail::sqrt_of(x))
XGRAD_VECTOR_UNARY_OP(rsqrt,   detail::lit<X>(1) / detail::sqrt_of(x), detail::lit<X>(-0.5) / (x * detail::sqrt_of(x)))
XGRAD_VECTOR_UNARY_OP(tanh,    detail::tanh_of(x),                detail::lit<X>(1) - detail::tanh_of(x) * detail::tanh_of(x))
XGRAD_VECTOR_UNARY_OP(sigmoid, detail::sigmoid(x),                detail::sigmoid(x) * (detail::lit<X>(1) - detail::sigmoid(x)))
// SiLU (swish, Llama's MLP): x σ(x); d = σ + x σ (1 − σ).
XGRAD_VECTOR_UNARY_OP(silu,    x * detail::sigmoid(x),
                      detail::sigmoid(x) * (detail::lit<X>(1) + x * (detail::lit<X>(1) - detail::sigmoid(x))))
XGRAD_UNARY_OP(       relu,    x < 0 ? X(0) : x,                  x > 0 ? X(1) : X(0))  // NaN stays NaN, as torch
XGRAD_UNARY_OP(       abs,     std::abs(x),                       x > 0 ? X(1) : (x < 0 ? X(-1) : X(0)))
XGRAD_BATCH_UNARY_OP( square,  x * x,                             detail::lit<X>(2) * x)
// GELU, exact form (PyTorch approximate='none'): x Φ(x); Φ' = standard normal density.
XGRAD_VECTOR_UNARY_OP(gelu, x * detail::normal_cdf(x),    detail::normal_cdf(x) + x * detail::normal_pdf(x))
// GELU, tanh form (PyTorch approximate='tanh').
XGRAD_VECTOR_UNARY_OP(gelu_tanh, detail::gelu_tanh_f(x),  detail::gelu_tanh_d(x))

#undef XGRAD_VECTOR_UNARY_OP
#undef XGRAD_UNARY_OP
#undef XGRAD_UNARY_OP_OF
#undef XGRAD_BINARY_OP

template <Expression A>
auto operator-(const A& a) {
    return neg(a);
}

// x^p for a scalar exponent p.
struct pow_op {
    static constexpr const char* name = "pow";
    double p;
    template <std::floating_point X>
    X f(X x) const { return std::pow(x, X(p)); }
    template <std::floating_point X>
    X d(X x) const { return p == 0 ? X(0) : X(p) * std::pow(x, X(p - 1)); }
};
template <Expression A>
Expr<pow_op, A> pow(const A& a, double p) {
    return make_expr(pow_op{p}, detail::operand(a, "pow", "operand"));
}

// ---- where and masked_fill (torch.where, Tensor.masked_fill) ----
// where(cond, a, b): a where cond is true, else b, all three broadcast together (numpy rules); a or
// b may be a scalar (a constant, -inf included). The gradient of an element reaches only the operand
// it was taken from, as torch's. cond is a bool xtensor or an expression of one (`mask == 0`
// written xt::equal(mask, 0)), of fixed rank; it joins the expression as a constant 0/1 operand.
struct where_op {
    static constexpr const char* name = "where";
    template <std::floating_point X>
    X f(X c, X a, X b) const { return c != 0 ? a : b; }
    template <std::floating_point X>
    X da(X, X, X) const { return X(0); }  // the condition: a constant, never differentiated
    template <std::floating_point X>
    X db(X c, X, X) const { return c != 0 ? X(1) : X(0); }
    template <std::floating_point X>
    X dc(X c, X, X) const { return c != 0 ? X(0) : X(1); }
};

namespace detail {
// The rank of a bool xtensor or of an xtensor expression over fixed-rank operands.
template <class C>
constexpr std::size_t condition_rank() {
    using S = typename C::shape_type;
    if constexpr (requires { std::tuple_size<S>::value; })
        return std::tuple_size_v<S>;
    else
        return std::size_t(-1);
}
template <class T, class C>
Var<T, condition_rank<C>()> condition(const xt::xexpression<C>& cond) {
    static_assert(std::same_as<typename C::value_type, bool>,
                  "xgrad: where/masked_fill: the condition must hold bool (compare first, e.g. xt::equal(mask, 0))");
    static_assert(condition_rank<C>() != std::size_t(-1),
                  "xgrad: where/masked_fill: the condition needs a fixed rank (an xt::xtensor<bool, N>, not an xarray)");
    // Evaluated as bool first, then widened by a plain loop: xsimd 8's AVX-512 comparisons of
    // 64-bit integers (xt::equal(int64 mask, 0)) do not compile when fused into a float assignment.
    const xt::xtensor<bool, condition_rank<C>()> flags = cond.derived_cast();
    xt::xtensor<T, condition_rank<C>()> values = xt::xtensor<T, condition_rank<C>()>::from_shape(flags.shape());
    std::transform(flags.begin(), flags.end(), values.begin(), [](bool f) { return f ? T(1) : T(0); });
    return constant(std::move(values));
}
template <class T, class X>
auto where_operand(const X& x, const char* which) {
    if constexpr (Expression<X>)
        return operand(x, "where", which);
    else
        return Const<T>{static_cast<T>(x)};
}
template <class A, class B>
using where_value_type = typename std::conditional_t<Expression<A>, A, B>::value_type;
}  // namespace detail

// Forwarding references, constrained: for a condition of xtensor's, argument-dependent lookup also
// finds xt::where, which this (more constrained) overload must win.
template <class C, class A, class B>
    requires(xt::is_xexpression<std::remove_cvref_t<C>>::value &&
             (Expression<std::remove_cvref_t<A>> || std::is_arithmetic_v<std::remove_cvref_t<A>>) &&
             (Expression<std::remove_cvref_t<B>> || std::is_arithmetic_v<std::remove_cvref_t<B>>) &&
             (Expression<std::remove_cvref_t<A>> || Expression<std::remove_cvref_t<B>>))
auto where(C&& cond, A&& a, B&& b) {
    using T = detail::where_value_type<std::remove_cvref_t<A>, std::remove_cvref_t<B>>;
    return make_expr(where_op{}, detail::condition<T>(cond), detail::where_operand<T>(a, "operand a"),
                     detail::where_operand<T>(b, "operand b"));
}

// x.masked_fill(mask, value): value where mask is true, else x; mask broadcasts to x's shape (the
// result has x's shape, as torch's). `att.masked_fill(mask == 0, float('-inf'))` is
// masked_fill(att, xt::equal(mask, 0), -inf); docs/masking.md maps every torch idiom.
template <Expression A, class C>
auto masked_fill(const A& x, const xt::xexpression<C>& mask, double value) {
    constexpr std::size_t M = detail::condition_rank<C>();
    static_assert(M == std::size_t(-1) || M <= A::rank,
                  "xgrad: masked_fill: the mask has more dimensions than the tensor it fills");
    auto out = where(mask.derived_cast(), value, x);
    const auto shape = expr_shape(x), result = expr_shape(out);
    if (!std::equal(shape.begin(), shape.end(), result.begin()))
        throw shape_error("masked_fill: the mask " + shape_str(mask.derived_cast().shape()) +
                          " does not broadcast to the filled tensor's shape " + shape_str(shape));
    return out;
}

}  // namespace xgrad
