// Elementwise ops: each is one line giving f(x) and its derivative (unary: d, binary: da, db).
// They compose lazily into expressions (core/expr.hpp) and fuse into one node when materialized.
#pragma once
#include <cmath>
#include <concepts>
#include <numbers>

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

#define XGRAD_UNARY_OP(NAME, F, D)                                   \
    struct NAME##_op {                                               \
        static constexpr const char* name = #NAME;                   \
        template <std::floating_point X>                             \
        X f(X x) const {                                             \
            return F;                                                \
        }                                                            \
        template <std::floating_point X>                             \
        X d([[maybe_unused]] X x) const {                                         \
            return D;                                                \
        }                                                            \
    };                                                               \
    template <Expression A>                                          \
    Expr<NAME##_op, A> NAME(const A& a) {                            \
        return make_expr(NAME##_op{}, detail::operand(a, #NAME, "operand")); \
    }

#define XGRAD_BINARY_OP(NAME, SYMBOL, F, DA, DB)                                 \
    struct NAME##_op {                                                           \
        static constexpr const char* name = #NAME;                               \
        template <std::floating_point X>                                         \
        X f([[maybe_unused]] X a, [[maybe_unused]] X b) const {                                                  \
            return F;                                                            \
        }                                                                        \
        template <std::floating_point X>                                         \
        X da([[maybe_unused]] X a, [[maybe_unused]] X b) const {                                                 \
            return DA;                                                           \
        }                                                                        \
        template <std::floating_point X>                                         \
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
XGRAD_BINARY_OP(add,     +,      a + b,    X(1),     X(1))
XGRAD_BINARY_OP(sub,     -,      a - b,    X(1),     X(-1))
XGRAD_BINARY_OP(mul,     *,      a * b,    b,        a)
XGRAD_BINARY_OP(div,     /,      a / b,    1 / b,    -(a / b) / b)

//             name     f(x)                              df/dx
XGRAD_UNARY_OP(neg,     -x,                               X(-1))
XGRAD_UNARY_OP(exp,     std::exp(x),                      std::exp(x))
XGRAD_UNARY_OP(log,     std::log(x),                      1 / x)
XGRAD_UNARY_OP(sqrt,    std::sqrt(x),                     X(0.5) / std::sqrt(x))
XGRAD_UNARY_OP(tanh,    std::tanh(x),                     1 - std::tanh(x) * std::tanh(x))
XGRAD_UNARY_OP(sigmoid, detail::sigmoid(x),               detail::sigmoid(x) * (1 - detail::sigmoid(x)))
XGRAD_UNARY_OP(relu,    x < 0 ? X(0) : x,                 x > 0 ? X(1) : X(0))  // NaN stays NaN, as torch
XGRAD_UNARY_OP(abs,     std::abs(x),                      x > 0 ? X(1) : (x < 0 ? X(-1) : X(0)))
XGRAD_UNARY_OP(square,  x * x,                            2 * x)
// GELU, exact form (PyTorch approximate='none'): x Φ(x); Φ' = standard normal density.
XGRAD_UNARY_OP(gelu,    x * detail::normal_cdf(x),        detail::normal_cdf(x) + x * detail::normal_pdf(x))
// GELU, tanh form (PyTorch approximate='tanh').
XGRAD_UNARY_OP(gelu_tanh, detail::gelu_tanh_f(x),         detail::gelu_tanh_d(x))

#undef XGRAD_UNARY_OP
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

}  // namespace xgrad
