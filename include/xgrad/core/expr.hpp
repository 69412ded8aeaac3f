// Compile-time elementwise expressions. `tanh(a * b + c)` builds an Expr *type*; materializing it
// (assigning to a Var, or eval()) records ONE tape node whose forward is one fused xtensor pass and
// whose backward is generated from the expression type by the chain rule.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/hana.hpp>
#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xscalar.hpp>

#include "xgrad/core/broadcast.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad {

// A scalar constant inside an expression; broadcasts against anything, receives no gradient.
template <Real T>
struct Const {
    using xgrad_expression_tag = void;
    using value_type = T;
    static constexpr std::size_t rank = 0;
    T v;
};

// An elementwise op applied to child expressions (Var, Const or Expr), held in a boost::hana::tuple.
template <class Op, class... Cs>
struct Expr {
    using xgrad_expression_tag = void;
    using value_type = typename std::tuple_element_t<0, std::tuple<Cs...>>::value_type;
    static constexpr std::size_t rank = std::max({Cs::rank...});
    static_assert((std::same_as<typename Cs::value_type, value_type> && ...),
                  "xgrad: an expression cannot mix float and double operands");
    Op op;
    boost::hana::tuple<Cs...> children;
};

template <class Op, Expression... Cs>
Expr<Op, Cs...> make_expr(Op op, const Cs&... cs) {
    return {op, boost::hana::make_tuple(cs...)};
}

namespace detail {

// Scalar functors handed to xtensor; constrained to scalars so xtensor takes its scalar path.
template <class Op>
struct Forward {
    Op op;
    template <std::floating_point... X>
    auto operator()(X... x) const {
        return op.f(x...);
    }
};
// g * d(op)/d(child I), evaluated at the children's values (ops of one, two or three operands).
template <class Op, std::size_t I>
struct Chain {
    Op op;
    template <std::floating_point G, std::floating_point... X>
    G operator()(G g, X... x) const {
        if constexpr (sizeof...(X) == 1)
            return g * op.d(x...);
        else if constexpr (I == 0)
            return g * op.da(x...);
        else if constexpr (I == 1)
            return g * op.db(x...);
        else
            return g * op.dc(x...);
    }
};

}  // namespace detail

// ---- value: the lazy xtensor expression of a node's forward ----
template <Real T, std::size_t N>
const xt::xtensor<T, N>& eval_value(const Var<T, N>& v) {
    return v.value();
}
template <Real T>
auto eval_value(const Const<T>& c) {
    return xt::xscalar<T>(c.v);
}
template <class Op, class... Cs>
auto eval_value(const Expr<Op, Cs...>& e) {
    return boost::hana::unpack(e.children, [&](const auto&... c) {
        return xt::make_lambda_xfunction(detail::Forward<Op>{e.op}, eval_value(c)...);
    });
}

// ---- shape: numpy broadcast over the tree, with errors naming the op ----
template <Real T, std::size_t N>
std::array<std::size_t, N> expr_shape(const Var<T, N>& v) {
    std::array<std::size_t, N> s;
    std::copy(v.shape().begin(), v.shape().end(), s.begin());
    return s;
}
template <Real T>
std::array<std::size_t, 0> expr_shape(const Const<T>&) {
    return {};
}
template <class Op, class... Cs>
std::array<std::size_t, Expr<Op, Cs...>::rank> expr_shape(const Expr<Op, Cs...>& e) {
    constexpr std::size_t R = Expr<Op, Cs...>::rank;
    std::array<std::size_t, R> out;
    out.fill(1);
    boost::hana::for_each(e.children,
                   [&](const auto& c) { out = detail::broadcast_shapes<R>(out, expr_shape(c), Op::name); });
    return out;
}

// ---- does any leaf under this node require grad? ----
template <Real T, std::size_t N>
bool needs_grad(const Var<T, N>& v) {
    return v.requires_grad();
}
template <Real T>
bool needs_grad(const Const<T>&) {
    return false;
}
template <class Op, class... Cs>
bool needs_grad(const Expr<Op, Cs...>& e) {
    return boost::hana::unpack(e.children, [](const auto&... c) { return (needs_grad(c) || ...); });
}

// ---- backward: chain rule over the expression type ----
// `g` is the gradient of the expression's output (an xtensor expression of the output shape).
template <Real T, std::size_t N, class G>
void backprop(const Var<T, N>& v, const G& g) {
    if (!v.requires_grad()) return;
    auto& grad = v.node()->grad_buffer();
    const auto& gs = g.shape();
    if (gs.size() == N && std::equal(gs.begin(), gs.end(), grad.shape().begin())) {
        xt::noalias(grad) += g;
    } else {  // v was broadcast: sum the gradient over the broadcast axes
        // g evaluated into this thread's scratch, which only grows: a steady step allocates nothing
        constexpr std::size_t M = std::tuple_size_v<std::decay_t<decltype(gs)>>;
        thread_local std::vector<T> scratch;
        std::array<std::size_t, M> shape;
        std::copy(gs.begin(), gs.end(), shape.begin());
        std::size_t size = 1;
        for (const std::size_t d : shape) size *= d;
        if (scratch.size() < size) scratch.resize(size);
        auto full = xt::adapt(scratch.data(), size, xt::no_ownership(), shape);
        xt::noalias(full) = g;
        detail::add_reduced(scratch.data(), shape, grad.data(), grad.shape());
    }
}
template <Real T, class G>
void backprop(const Const<T>&, const G&) {}
template <class Op, class... Cs, class G>
void backprop(const Expr<Op, Cs...>& e, const G& g) {
    boost::hana::for_each(boost::hana::make_range(boost::hana::size_c<0>, boost::hana::size_c<sizeof...(Cs)>), [&](auto i) {
        const auto& child = boost::hana::at(e.children, i);
        if (!needs_grad(child)) return;
        boost::hana::unpack(e.children, [&](const auto&... c) {
            backprop(child, xt::make_lambda_xfunction(detail::Chain<Op, decltype(i)::value>{e.op}, g, eval_value(c)...));
        });
    });
}

// ---- name: the expression as a formula of op names, "log(mul(x, c))" (x a Var, c a constant) ----
template <Real T, std::size_t N>
std::string formula(const Var<T, N>*) {
    return "x";
}
template <Real T>
std::string formula(const Const<T>*) {
    return "c";
}
template <class Op, class... Cs>
std::string formula(const Expr<Op, Cs...>*) {
    std::string args;
    ((args += (args.empty() ? "" : ", ") + formula(static_cast<const Cs*>(nullptr))), ...);
    return std::string(Op::name) + "(" + args + ")";
}

// ---- an expression as an op's input slot (var.hpp: OpNode): the Vars it reads, in formula order ----
template <Real T>
void visit_input(const Node::InputVisitor&, const Const<T>&) {}
template <class Op, class... Cs>
void visit_input(const Node::InputVisitor& f, const Expr<Op, Cs...>& e) {
    boost::hana::for_each(e.children, [&](const auto& c) { visit_input(f, c); });
}
template <LazyExpression E>
void visit_input(const Node::InputVisitor& f, const std::optional<E>& e) {
    if (e) visit_input(f, *e);
}
template <LazyExpression E>
void release_input(std::optional<E>& e) {
    e.reset();
}

// An op's input that is an expression needs a gradient when some Var in it does (for make_op).
template <LazyExpression E>
bool input_requires_grad(const E& e) {
    return needs_grad(e);
}

// The tape node of a materialized expression.
template <class E>
class ExprNode final : public OpNode<ExprNode<E>, typename E::value_type, E::rank> {
public:
    std::optional<E> expr;
    auto inputs() { return std::tie(expr); }
    void forward() { xt::noalias(this->value) = eval_value(*expr); }
    void backward() override { backprop(*expr, this->grad_buffer()); }
    const char* op_name() const override {
        static const std::string name = "elementwise " + formula(static_cast<const E*>(nullptr));
        return name.c_str();
    }
};

// Materializes an expression into one node: one fused forward pass.
template <Expression E>
Var<typename E::value_type, E::rank> eval(const E& e) {
    if constexpr (requires { e.node(); }) {
        return e;  // already a Var
    } else {
        return make_op<ExprNode<E>>(expr_shape(e), [](auto& node) { node.forward(); }, e);
    }
}

// eval has one meaning: materializing an expression. A model is switched to evaluation by
// set_training(model, false) (nn/module.hpp).
template <class X>
    requires(!Expression<X>)
void eval(const X&) {
    static_assert(!sizeof(X*), "xgrad: eval(x) materializes an expression; to switch a model to evaluation mode "
                               "use set_training(model, false)");
}

template <Real T, std::size_t N>
template <Expression E>
    requires(!std::same_as<std::remove_cvref_t<E>, Var<T, N>>)
Var<T, N>::Var(const E& expr) {
    static_assert(E::rank == N, "xgrad: rank mismatch: the expression's rank differs from the Var it is assigned to");
    static_assert(std::same_as<typename E::value_type, T>,
                  "xgrad: dtype mismatch: the expression's element type differs from the Var it is assigned to");
    *this = eval(expr);
}

}  // namespace xgrad
