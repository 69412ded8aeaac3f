// Compile-time elementwise expressions. `tanh(a * b + c)` builds an Expr *type*; materializing it
// (assigning to a Var, or eval()) records ONE tape node whose forward is one fused pass over the
// elements (core/expr_loop.hpp) and whose backward is generated from the expression type by the
// chain rule, a pass per operand that needs a gradient.
#pragma once
#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xgrad/core/broadcast.hpp"
#include "xgrad/core/expr_loop.hpp"
#include "xgrad/core/simd.hpp"
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

namespace detail {
// An expression's children: a base ChildSlot<I, C> per child, read by child<I>(children).
template <std::size_t I, class C>
struct ChildSlot {
    C child;
};
template <class Indices, class... Cs>
struct ChildSlots;
template <std::size_t... I, class... Cs>
struct ChildSlots<std::index_sequence<I...>, Cs...> : ChildSlot<I, Cs>... {};
template <class... Cs>
using Children = ChildSlots<std::index_sequence_for<Cs...>, Cs...>;

template <std::size_t I, class C>
const C& child(const ChildSlot<I, C>& slot) {
    return slot.child;
}
// f(child) for every child, in order.
template <class... Cs, class F>
void for_each_child(const Children<Cs...>& children, F&& f) {
    [&]<std::size_t... I>(std::index_sequence<I...>) { (f(child<I>(children)), ...); }(std::index_sequence_for<Cs...>{});
}
}  // namespace detail

// An elementwise op applied to child expressions (Var, Const or Expr).
template <class Op, class... Cs>
struct Expr {
    using xgrad_expression_tag = void;
    using value_type = typename std::tuple_element_t<0, std::tuple<Cs...>>::value_type;
    static constexpr std::size_t rank = std::max({Cs::rank...});
    static_assert((std::same_as<typename Cs::value_type, value_type> && ...),
                  "xgrad: an expression cannot mix float and double operands");
    Op op;
    detail::Children<Cs...> children;
};

template <class Op, Expression... Cs>
Expr<Op, Cs...> make_expr(Op op, const Cs&... cs) {
    return {op, {{cs}...}};
}

namespace detail {

// A gradient flowing into an expression's backward: the output's gradient, contiguous, as a leaf.
template <Real T, std::size_t R>
struct Values {
    using value_type = T;
    static constexpr std::size_t rank = R;
    const T* data;
    std::array<std::size_t, R> shape;
};

// A child of an expression read in place, by its backward's chain expressions (no copy of its Vars).
template <class C>
struct Ref {
    using value_type = typename C::value_type;
    static constexpr std::size_t rank = C::rank;
    const C* of;
};

// Whether Op has the partial derivative toward operand I for operands of types X (scalars, or
// SIMD batches when the op is written for them).
template <class Op, std::size_t I, class... X>
concept has_partial = (sizeof...(X) == 1 && requires(const Op& op, X... x) { op.d(x...); }) ||
                      (sizeof...(X) > 1 && I == 0 && requires(const Op& op, X... x) { op.da(x...); }) ||
                      (sizeof...(X) > 1 && I == 1 && requires(const Op& op, X... x) { op.db(x...); }) ||
                      (sizeof...(X) > 1 && I == 2 && requires(const Op& op, X... x) { op.dc(x...); });

// An op asks for the loop a vector at a time (`vectorize`) when its formula calls libm or branches,
// which keeps g++ from vectorizing the element loop itself.
template <class Op>
constexpr bool op_vectorizes() {
    if constexpr (requires { Op::vectorize; }) return Op::vectorize;
    else return false;
}

// g * d(op)/d(child I), evaluated at the children's values (ops of one, two or three operands):
// the op of the expression that carries a gradient back to child I.
template <class Op, std::size_t I>
struct Chain {
    Op op;
    static constexpr bool vectorize = op_vectorizes<Op>();
    template <class G, class... X>
        requires has_partial<Op, I, X...>
    G f(G g, X... x) const {
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

// ---- the leaves (tensors read by the loop) of an expression tree, numbered left to right ----
template <class E>
struct leaf_count : std::integral_constant<std::size_t, 1> {};  // a Var or Values
template <Real T>
struct leaf_count<Const<T>> : std::integral_constant<std::size_t, 0> {};
template <class Op, class... Cs>
struct leaf_count<Expr<Op, Cs...>> : std::integral_constant<std::size_t, (0 + ... + leaf_count<Cs>::value)> {};
template <class C>
struct leaf_count<Ref<C>> : leaf_count<C> {};

// The number of the first leaf of child I.
template <std::size_t I, class... Cs>
constexpr std::size_t first_leaf_of() {
    constexpr std::array<std::size_t, sizeof...(Cs)> counts{leaf_count<Cs>::value...};
    std::size_t first = 0;
    for (std::size_t i = 0; i < I; ++i) first += counts[i];
    return first;
}

template <std::size_t First, Real T, std::size_t N, std::size_t K>
void collect_leaves(const Var<T, N>& v, std::array<const T*, K>& data, std::array<OperandShape, K + 1>& shapes) {
    data[First] = v.value().data();
    shapes[First + 1] = {v.value().shape().data(), N};
}
template <std::size_t First, Real T, std::size_t R, std::size_t K>
void collect_leaves(const Values<T, R>& v, std::array<const T*, K>& data, std::array<OperandShape, K + 1>& shapes) {
    data[First] = v.data;
    shapes[First + 1] = {v.shape.data(), R};
}
template <std::size_t First, Real T, std::size_t K>
void collect_leaves(const Const<T>&, std::array<const T*, K>&, std::array<OperandShape, K + 1>&) {}
template <std::size_t First, class C, class T, std::size_t K>
void collect_leaves(const Ref<C>& r, std::array<const T*, K>& data, std::array<OperandShape, K + 1>& shapes) {
    collect_leaves<First>(*r.of, data, shapes);
}
template <std::size_t First, class Op, class... Cs, class T, std::size_t K>
void collect_leaves(const Expr<Op, Cs...>& e, std::array<const T*, K>& data, std::array<OperandShape, K + 1>& shapes) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        (collect_leaves<First + first_leaf_of<I, Cs...>()>(child<I>(e.children), data, shapes), ...);
    }(std::index_sequence_for<Cs...>{});
}

// The leaves' positions in the current row; element j of leaf k is at[k][j * step[k]].
template <class T, std::size_t K>
struct RowCursor {
    std::array<const T*, K> at;
    std::array<std::size_t, K> step;
};

// The expression's value at element j of the row (Contiguous: every step is 1).
template <bool Contiguous, std::size_t First, class E, class Cursor>
auto value_at(const E&, const Cursor& c, std::size_t j) {  // a Var or Values
    return Contiguous ? c.at[First][j] : c.at[First][j * c.step[First]];
}
template <bool Contiguous, std::size_t First, Real T, class Cursor>
T value_at(const Const<T>& e, const Cursor&, std::size_t) {
    return e.v;
}
template <bool Contiguous, std::size_t First, class C, class Cursor>
auto value_at(const Ref<C>& r, const Cursor& c, std::size_t j) {
    return value_at<Contiguous, First>(*r.of, c, j);
}
template <bool Contiguous, std::size_t First, class Op, class... Cs, class Cursor>
auto value_at(const Expr<Op, Cs...>& e, const Cursor& c, std::size_t j) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return e.op.f(value_at<Contiguous, First + first_leaf_of<I, Cs...>()>(child<I>(e.children), c, j)...);
    }(std::index_sequence_for<Cs...>{});
}

// ---- a vector at a time: every op of the tree takes SIMD batches, and one asks for it ----
template <class E, class V>
struct takes_batches : std::true_type {};  // a leaf
template <class C, class V>
struct takes_batches<Ref<C>, V> : takes_batches<C, V> {};
template <class V, class C>
using batch_for = V;
template <class Op, class... Cs, class V>
struct takes_batches<Expr<Op, Cs...>, V>
    : std::bool_constant<(takes_batches<Cs, V>::value && ...) &&
                         requires(const Op& op, batch_for<V, Cs>... v) { op.f(v...); }> {};
template <class E>
struct asks_vectors : std::false_type {};
template <class C>
struct asks_vectors<Ref<C>> : asks_vectors<C> {};
template <class Op, class... Cs>
struct asks_vectors<Expr<Op, Cs...>> : std::bool_constant<op_vectorizes<Op>() || (asks_vectors<Cs>::value || ...)> {};
template <class E>
inline constexpr bool by_vectors =
    asks_vectors<E>::value && takes_batches<E, simd::Vec<typename E::value_type>>::value;

// The expression's value at elements [j, j + lanes) of a contiguous row.
template <std::size_t First, class E, class Cursor>
auto vector_at(const E&, const Cursor& c, std::size_t j) {  // a Var or Values
    return simd::Vec<typename E::value_type>::load_unaligned(c.at[First] + j);
}
template <std::size_t First, Real T, class Cursor>
simd::Vec<T> vector_at(const Const<T>& e, const Cursor&, std::size_t) {
    return simd::Vec<T>(e.v);
}
template <std::size_t First, class C, class Cursor>
auto vector_at(const Ref<C>& r, const Cursor& c, std::size_t j) {
    return vector_at<First>(*r.of, c, j);
}
template <std::size_t First, class Op, class... Cs, class Cursor>
auto vector_at(const Expr<Op, Cs...>& e, const Cursor& c, std::size_t j) {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
        return e.op.f(vector_at<First + first_leaf_of<I, Cs...>()>(child<I>(e.children), c, j)...);
    }(std::index_sequence_for<Cs...>{});
}

// dst (of dst_shape, broadcast to `shape`) = e (Accumulate: +=, summed over the broadcast axes),
// e evaluated over `shape`; contiguous rows a vector at a time when by_vectors<E>, the rest (and
// a row's last partial vector) an element at a time.
template <bool Accumulate, class E, std::size_t R>
void evaluate(const E& e, typename E::value_type* dst, OperandShape dst_shape, const std::array<std::size_t, R>& shape) {
    using T = typename E::value_type;
    constexpr std::size_t K = leaf_count<E>::value;
    std::array<const T*, K> data;
    std::array<OperandShape, K + 1> shapes;
    shapes[0] = dst_shape;
    collect_leaves<0>(e, data, shapes);
    const LoopPlan<K + 1> plan = plan_loop(shape.data(), R, shapes);
    if (plan.size == 0) return;
    const std::size_t inner = plan.rank - 1, n = plan.extent[inner], dst_step = plan.stride[0][inner];
    RowCursor<T, K> row;
    bool contiguous = dst_step == 1;
    for (std::size_t k = 0; k < K; ++k) {
        row.step[k] = plan.stride[k + 1][inner];
        contiguous = contiguous && row.step[k] == 1;
    }
    for_each_row(plan, [&](const std::array<std::size_t, K + 1>& offset) {
        for (std::size_t k = 0; k < K; ++k) row.at[k] = data[k] + offset[k + 1];
        T* out = dst + offset[0];
        if (contiguous) {
            std::size_t j = 0;
            if constexpr (by_vectors<E>) {
                using V = simd::Vec<T>;
                for (; j + V::size <= n; j += V::size) {
                    V v = vector_at<0>(e, row, j);
                    if constexpr (Accumulate) v = V::load_unaligned(out + j) + v;
                    v.store_unaligned(out + j);
                }
            }
            for (; j < n; ++j) {
                if constexpr (Accumulate) out[j] += value_at<true, 0>(e, row, j);
                else out[j] = value_at<true, 0>(e, row, j);
            }
        } else if (Accumulate && dst_step == 0) {  // dst broadcast along the row: sum it first
            T sum = 0;
            for (std::size_t j = 0; j < n; ++j) sum += value_at<false, 0>(e, row, j);
            *out += sum;
        } else {
            for (std::size_t j = 0; j < n; ++j) {
                if constexpr (Accumulate) out[j * dst_step] += value_at<false, 0>(e, row, j);
                else out[j * dst_step] = value_at<false, 0>(e, row, j);
            }
        }
    });
}

}  // namespace detail

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
    detail::for_each_child(e.children,
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
    bool any = false;
    detail::for_each_child(e.children, [&](const auto& c) { any = any || needs_grad(c); });
    return any;
}

// ---- backward: chain rule over the expression type ----
// `g`: the gradient reaching this subtree, an expression evaluated over the output's `shape` (the
// output's gradient as detail::Values, wrapped in one detail::Chain per level above, which reads
// the children where they are: detail::Ref).
template <Real T, std::size_t N, class G, std::size_t R>
void backprop(const Var<T, N>& v, const G& g, const std::array<std::size_t, R>& shape) {
    // added to v's gradient (zero-filled on first touch), summed over the axes v was broadcast along;
    // one loop for both keeps each leaf's backward to one instantiation
    if (v.requires_grad()) detail::evaluate<true>(g, v.node()->grad_buffer().data(), {v.shape().data(), N}, shape);
}
template <Real T, class G, std::size_t R>
void backprop(const Const<T>&, const G&, const std::array<std::size_t, R>&) {}
template <class Op, class... Cs, class G, std::size_t R>
void backprop(const Expr<Op, Cs...>& e, const G& g, const std::array<std::size_t, R>& shape) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        // the operands of every chain expression: the gradient, then the children where they are
        const detail::Children<G, detail::Ref<Cs>...> operands{{g}, {detail::Ref<Cs>{&detail::child<I>(e.children)}}...};
        const auto to_child = [&]<std::size_t J>(std::integral_constant<std::size_t, J>) {
            const auto& c = detail::child<J>(e.children);
            if (needs_grad(c)) backprop(c, Expr<detail::Chain<Op, J>, G, detail::Ref<Cs>...>{{e.op}, operands}, shape);
        };
        (to_child(std::integral_constant<std::size_t, I>{}), ...);
    }(std::index_sequence_for<Cs...>{});
}

// ---- name: the expression as a formula of op names, "log(mul(x, c))" (x a Var, c a constant) ----
namespace detail {
// The formula in prefix order, a token per op (name, operand count) or leaf ("x" or "c", 0), as a
// compile-time array: only the text is built at run time, by one function for every expression.
struct FormulaToken {
    const char* name;
    std::size_t operands;
};
template <class E>
struct Formula {  // a Var
    static constexpr std::size_t size = 1;
    static constexpr void put(FormulaToken* out) { *out = {"x", 0}; }
};
template <Real T>
struct Formula<Const<T>> {
    static constexpr std::size_t size = 1;
    static constexpr void put(FormulaToken* out) { *out = {"c", 0}; }
};
template <class Op, class... Cs>
struct Formula<Expr<Op, Cs...>> {
    static constexpr std::size_t size = (1 + ... + Formula<Cs>::size);
    static constexpr void put(FormulaToken* out) {
        *out++ = {Op::name, sizeof...(Cs)};
        ((Formula<Cs>::put(out), out += Formula<Cs>::size), ...);
    }
};
template <class E>
constexpr std::array<FormulaToken, Formula<E>::size> formula_tokens() {
    std::array<FormulaToken, Formula<E>::size> tokens{};
    Formula<E>::put(tokens.data());
    return tokens;
}
// The text of the subformula starting at `at`, which moves past it (compiled in libxgrad).
std::string formula_text(const FormulaToken*& at);
}  // namespace detail
template <class E>
std::string formula() {
    static constexpr auto tokens = detail::formula_tokens<E>();
    const detail::FormulaToken* at = tokens.data();
    return detail::formula_text(at);
}

// ---- an expression as an op's input slot (var.hpp: OpNode): the Vars it reads, in formula order ----
template <Real T>
void visit_input(const Node::InputVisitor&, const Const<T>&) {}
template <class Op, class... Cs>
void visit_input(const Node::InputVisitor& f, const Expr<Op, Cs...>& e) {
    detail::for_each_child(e.children, [&](const auto& c) { visit_input(f, c); });
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
    void forward() {
        detail::evaluate<false>(*expr, this->value.data(), {this->value.shape().data(), E::rank}, shape());
    }
    void backward() override {
        backprop(*expr, detail::Values<typename E::value_type, E::rank>{this->grad_buffer().data(), shape()}, shape());
    }
    std::array<std::size_t, E::rank> shape() const {
        std::array<std::size_t, E::rank> s{};
        std::copy(this->value.shape().begin(), this->value.shape().end(), s.begin());
        return s;
    }
    const char* op_name() const override {
        static const std::string name = "elementwise " + formula<E>();
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

// backward from an expression (a loss written as `sum(a) + sum(b)`): materialized, then as a Var.
template <LazyExpression E>
void backward(const E& loss, const BackwardOptions& options = {}) {
    backward(eval(loss), options);
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
