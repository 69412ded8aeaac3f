// Modules: plain structs whose parameters and submodules are reflected with Boost.Hana.
//
//   template <Real T> struct Block {
//       BOOST_HANA_DEFINE_STRUCT(Block, (Linear<T>, proj), (std::vector<Linear<T>>, layers),
//                                (std::array<Dropout, 2>, drops), (std::optional<LayerNorm<T>>, norm),
//                                (Var<T, 1>, scale));
//       bool training = true;   // optional; set_training(m, bool) sets it
//   };
//
// One walk (detail::walk) visits every reflected member with PyTorch's dotted name — "proj.weight",
// "layers.0.bias", "drops.1.generator", "norm.weight" (an empty optional and an empty Var, e.g. an
// absent bias, are skipped) — and everything else (for_each_parameter, named_parameters, zero_grad,
// set_training, parameter_count, named_generators, state dicts, optimizers, clone) is built on it.
//
// What a reflected member may be:
//   Var<T, N>                              a parameter
//   a module (BOOST_HANA_DEFINE_STRUCT)    walked, its names prefixed by the member's name
//   std::vector / std::array / std::optional of any of these
//   std::shared_ptr<Generator>             a module's own random source (named_generators, checkpoints)
//   state: arithmetic, enum, std::string, xt::xtensor / xt::xarray (a constant, neither trained nor
//          saved), or any X with xgrad::is_module_state<X> specialized to true
// Anything else is a compile error ("xgrad: ... cannot be walked"), never skipped. Members declared
// outside BOOST_HANA_DEFINE_STRUCT (options, flags) are not reflected at all.
//
// Tied parameters, as PyTorch: two names may hold the same tensor (a copy of a module shares its
// tensors; `out.weight = embed.weight` ties deliberately). for_each_parameter yields each tensor once,
// under its first name; for_each_parameter_name yields every name (state dicts write them all).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana.hpp>
#include <xtensor/xexpression.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad {

template <class M>
concept Module = boost::hana::Struct<M>::value;

// Member types the walk accepts as plain state (not parameters): specialize for your own.
template <class X>
struct is_module_state
    : std::bool_constant<std::is_arithmetic_v<X> || std::is_enum_v<X> || std::same_as<X, std::string> ||
                         xt::is_xexpression<X>::value> {};

// The generators of a model, by name: what io::save_checkpoint / load_checkpoint save and restore.
using NamedGenerators = std::vector<std::pair<std::string, Generator*>>;

namespace detail {
template <class X>
struct is_var : std::false_type {};
template <Real T, std::size_t N>
struct is_var<Var<T, N>> : std::true_type {};
template <class X>
struct is_sequence : std::false_type {};  // walked element by element, named by index
template <class X, class A>
struct is_sequence<std::vector<X, A>> : std::true_type {};
template <class X, std::size_t N>
struct is_sequence<std::array<X, N>> : std::true_type {};
template <class X>
struct is_optional : std::false_type {};
template <class X>
struct is_optional<std::optional<X>> : std::true_type {};
template <class X>
inline constexpr bool always_false = false;

inline std::string join_name(const std::string& prefix, std::string_view field) {
    std::string name = prefix;
    if (!name.empty()) name += '.';
    name += field;
    return name;
}

struct Ignore {
    template <class... A>
    void operator()(A&&...) const {}
};

// The one module walk. Visits x (named `name`) and every member reflected inside it:
//   on_var(name, var)        every non-empty Var, once per name (a tied tensor under each of its names)
//   on_module(name, module)  every module, pre-order (the root is named "")
//   on_generator(name, ptr)  every non-null std::shared_ptr<Generator> member, once per name
// const-ness of x carries to what the callbacks receive.
template <class X, class OnVar, class OnModule, class OnGenerator>
void walk(X& x, const std::string& name, OnVar& on_var, OnModule& on_module, OnGenerator& on_generator) {
    using U = std::remove_const_t<X>;
    if constexpr (is_var<U>::value) {
        if (x) on_var(name, x);
    } else if constexpr (std::same_as<U, std::shared_ptr<Generator>>) {
        if (x) on_generator(name, x);
    } else if constexpr (Module<U>) {
        on_module(name, x);
        boost::hana::for_each(boost::hana::accessors<U>(), [&](auto pair) {
            walk(boost::hana::second(pair)(x), join_name(name, boost::hana::to<const char*>(boost::hana::first(pair))),
                 on_var, on_module, on_generator);
        });
    } else if constexpr (is_sequence<U>::value) {
        for (std::size_t i = 0; i < x.size(); ++i)
            walk(x[i], join_name(name, std::to_string(i)), on_var, on_module, on_generator);
    } else if constexpr (is_optional<U>::value) {
        if (x) walk(*x, name, on_var, on_module, on_generator);
    } else {
        static_assert(is_module_state<U>::value,
                      "xgrad: this module member cannot be walked: a member in BOOST_HANA_DEFINE_STRUCT must be a "
                      "Var, a module, a std::vector / std::array / std::optional of those, a std::shared_ptr<Generator>, "
                      "or state (arithmetic, enum, std::string, xt::xtensor; or specialize xgrad::is_module_state)");
    }
}

}  // namespace detail

// What a module call takes: a Var<T, N> as it is, or an elementwise expression of T (x + pos,
// relu(x)) materialized into one node (eval, core/expr.hpp); T = void accepts either dtype. Anything
// else is one compile error; the empty Var returned then keeps the caller's code from adding more.
// The library's modules take their inputs through it, and so can a user's:
//   template <class X> Var<float, 3> operator()(const X& x) const { auto h = module_input<float>(x); ... }
template <class T, class X>
auto module_input(const X& x) {
    constexpr bool dtype_ok = [] {
        if constexpr (Expression<X>) return std::is_void_v<T> || std::same_as<typename X::value_type, T>;
        else return false;
    }();
    if constexpr (detail::is_var<X>::value && dtype_ok) return x;
    else if constexpr (LazyExpression<X> && dtype_ok) return eval(x);
    else {
        static_assert(detail::always_false<X>, "xgrad: a module takes a Var<T, N> of the module's dtype T, or an "
                                               "elementwise expression of T (x + pos, relu(x)); this argument is neither");
        constexpr std::size_t rank = [] {  // the argument's rank when it has one, so that no second error follows
            if constexpr (requires { std::size_t(X::rank); }) return std::size_t(X::rank);
            else return std::size_t(3);
        }();
        return Var<std::conditional_t<std::is_void_v<T>, double, T>, rank>{};
    }
}

namespace detail {
using xgrad::module_input;  // the library's modules call it as detail::module_input

// For a module taking several inputs (attention's query, key, value): module_input(x), or the
// input already made of an earlier argument (earlier, its input, ...) that is the same object, so
// that forward(e, e, e) materializes the expression e once.
template <class T, class X>
auto module_input_reusing(const X& x) {
    return module_input<T>(x);
}
template <class T, class X, class Earlier, class Made, class... More>
auto module_input_reusing(const X& x, const Earlier& earlier, const Made& made, const More&... more) {
    if constexpr (std::same_as<X, Earlier>)
        if (&x == &earlier) return made;
    return module_input_reusing<T>(x, more...);
}
}  // namespace detail

// Calls f(name, var) for every name of every parameter, in declaration order: a tensor tied to
// several names is visited under each (what a state dict writes).
template <class M, class F>
    requires Module<std::remove_const_t<M>>
void for_each_parameter_name(M& m, F&& f) {
    detail::Ignore ignore;
    detail::walk(m, "", f, ignore, ignore);
}

namespace detail {
// Gives every distinct parameter tensor of m a new one, make(var), called in for_each_parameter
// order; every name of a tied tensor gets the same new one (the copy stays tied the same way).
template <class M, class Make>
void replace_parameters(M& m, Make&& make) {
    std::vector<std::pair<const Node*, std::shared_ptr<Node>>> replaced;  // old tensor -> new
    for_each_parameter_name(m, [&](const std::string&, auto& var) {
        using V = std::remove_cvref_t<decltype(var)>;
        const auto it = std::find_if(replaced.begin(), replaced.end(), [&](const auto& e) { return e.first == var.node(); });
        if (it != replaced.end()) {
            var = V(std::static_pointer_cast<typename V::node_type>(it->second));
            return;
        }
        const Node* old = var.node();
        V fresh = make(std::as_const(var));
        replaced.emplace_back(old, fresh.node_ptr());
        var = std::move(fresh);
    });
}

// for_each_parameter's callback: calls f for each tensor once, under its first name. A named type,
// not a lambda, so that the walk with it does not depend on the model's type and libxgrad can
// compile the walk of its own modules once (XGRAD_DETAIL_PARAMETER_WALK below).
template <class F>
struct FirstNameOnly {
    F& f;
    std::vector<const Node*> seen;
    template <class V>
    void operator()(const std::string& name, V& var);  // out of line: libxgrad compiles named_parameters' one
};
template <class F>
template <class V>
void FirstNameOnly<F>::operator()(const std::string& name, V& var) {
    if (std::find(seen.begin(), seen.end(), var.node()) != seen.end()) return;
    seen.push_back(var.node());
    f(name, var);
}
}  // namespace detail

// Calls f(name, var) for every parameter of m and of its submodules, each tensor once, under its
// first name, in declaration order. Works on const and non-const modules.
template <class M, class F>
    requires Module<std::remove_const_t<M>>
void for_each_parameter(M& m, F&& f) {
    detail::FirstNameOnly<std::remove_reference_t<F>> once{f, {}};
    detail::Ignore ignore;
    detail::walk(m, "", once, ignore, ignore);
}

// Calls f(name, module) for m (named "") and every submodule (pre-order).
template <class M, class F>
    requires Module<std::remove_const_t<M>>
void for_each_named_module(M& m, F&& f) {
    detail::Ignore ignore;
    detail::walk(m, "", ignore, f, ignore);
}

// Calls f(module) for m and every submodule (pre-order).
template <class M, class F>
    requires Module<std::remove_const_t<M>>
void for_each_module(M& m, F&& f) {
    for_each_named_module(m, [&](const std::string&, auto& sub) { f(sub); });
}

// Every Generator of m ("layers.0.dropout.generator", "self_attn.dropout_generator"), each once
// (under its first name), names prefixed by `prefix`: pass them to io::save_checkpoint / load_checkpoint so that a resumed run
// draws the same dropout masks.
template <class M>
    requires Module<M>
NamedGenerators named_generators(const M& m, const std::string& prefix = "") {
    NamedGenerators out;
    auto on_generator = [&](const std::string& name, const std::shared_ptr<Generator>& gen) {
        const auto same = [&](const auto& e) { return e.second == gen.get(); };
        if (std::none_of(out.begin(), out.end(), same)) out.emplace_back(prefix + name, gen.get());
    };
    detail::Ignore ignore;
    detail::walk(m, "", ignore, ignore, on_generator);
    return out;
}

// The groups of names that share one tensor (tied parameters), each in walk order; empty when
// every parameter is its own tensor.
template <class M>
    requires Module<M>
std::vector<std::vector<std::string>> tied_parameters(const M& m) {
    std::vector<std::pair<const Node*, std::vector<std::string>>> by_tensor;
    for_each_parameter_name(m, [&](const std::string& name, const auto& var) {
        auto it = std::find_if(by_tensor.begin(), by_tensor.end(), [&](const auto& e) { return e.first == var.node(); });
        if (it == by_tensor.end()) by_tensor.push_back({var.node(), {name}});
        else it->second.push_back(name);
    });
    std::vector<std::vector<std::string>> groups;
    for (auto& [node, names] : by_tensor)
        if (names.size() > 1) groups.push_back(std::move(names));
    return groups;
}

// A type-erased view of one parameter: what optimizers, clipping and checkpoints need.
template <Real T>
struct ParameterRef {
    std::string name;
    std::vector<std::size_t> shape;
    T* value = nullptr;  // contiguous, `size` elements; valid while the parameter keeps its shape
    std::size_t size = 0;
    std::function<const T*()> grad;  // nullptr when no gradient reached it since zero_grad
    std::function<T*()> mutable_grad;  // the same buffer, writable (clipping); nullptr likewise
    std::function<void()> zero_grad;
    const Node* node = nullptr;   // identity of the parameter
};

namespace detail {
// The ParameterRef of one parameter tensor, named `name`: compiled once in libxgrad (below), so
// that a program building an optimizer does not compile its std::function handlers per rank.
template <Real T, std::size_t N>
ParameterRef<T> parameter_ref(const std::string& name, Var<T, N>& var) {
    ParameterRef<T> p;
    p.name = name;
    p.shape.assign(var.shape().begin(), var.shape().end());
    p.value = var.value().data();
    p.size = var.size();
    p.grad = [var]() -> const T* { return var.has_grad() ? var.grad().data() : nullptr; };
    p.mutable_grad = [var]() -> T* { return var.has_grad() ? var.node()->grad_buffer().data() : nullptr; };
    p.zero_grad = [var] { var.zero_grad(); };
    p.node = var.node();
    return p;
}
}  // namespace detail

namespace detail {
// named_parameters' callback: each parameter's ParameterRef appended to `out`.
template <Real T>
struct CollectParameters {
    std::vector<ParameterRef<T>>& out;
    template <class V>
    void operator()(const std::string& name, V& var) {
        static_assert(std::same_as<typename V::value_type, T>, "xgrad: named_parameters<T>: a parameter has another dtype");
        out.push_back(parameter_ref(name, var));
    }
};
template <Real T>
using ParameterWalk = FirstNameOnly<CollectParameters<T>>;
}  // namespace detail

// Every distinct parameter tensor once (tied ones under their first name): what an optimizer updates.
template <Real T, class M>
    requires Module<M>
std::vector<ParameterRef<T>> named_parameters(M& m) {
    std::vector<ParameterRef<T>> out;
    detail::CollectParameters<T> collect{out};
    for_each_parameter(m, collect);
    return out;
}

// The number of trainable numbers: each distinct tensor counted once.
template <class M>
    requires Module<M>
std::size_t parameter_count(const M& m) {
    std::size_t n = 0;
    for_each_parameter(m, [&](const std::string&, const auto& var) { n += var.size(); });
    return n;
}

template <class M>
    requires Module<M>
void zero_grad(M& m) {
    for_each_parameter(m, [](const std::string&, auto& var) { var.zero_grad(); });
}

// set_training(m, true / false): PyTorch's m.train() / m.eval(). Sets `training` on every module
// that has that member (Dropout, attention). (eval(expr) is another thing: it materializes an
// expression, core/expr.hpp.)
template <class M>
    requires Module<M>
void set_training(M& m, bool on) {
    for_each_module(m, [on](auto& sub) {
        if constexpr (requires { sub.training = on; }) sub.training = on;
    });
}

}  // namespace xgrad

// named_parameters' walk of the library's module M, for M's list of what libxgrad compiles: a
// program's named_parameters (an optimizer's construction) then walks only its own modules.
#define XGRAD_DETAIL_PARAMETER_WALK(EXTERN, M, T)                                                       \
    EXTERN template void detail::walk<M, detail::ParameterWalk<T>, detail::Ignore, detail::Ignore>(     \
        M&, const std::string&, detail::ParameterWalk<T>&, detail::Ignore&, detail::Ignore&);

// Compiled once in libxgrad (xgrad/core/compiled.hpp): parameters of rank 0 to 4, and
// named_parameters' step for each.
namespace xgrad {
#define XGRAD_DETAIL_PARAMETER_REF_COMPILED(EXTERN, T, N)                                          \
    EXTERN template ParameterRef<T> detail::parameter_ref<T, N>(const std::string&, Var<T, N>&);    \
    EXTERN template void detail::ParameterWalk<T>::operator()<Var<T, N>>(const std::string&, Var<T, N>&);
#define XGRAD_DETAIL_PARAMETER_REFS_COMPILED(EXTERN, T) \
    XGRAD_COMPILED_RANKS_0_TO_4(XGRAD_DETAIL_PARAMETER_REF_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_PARAMETER_REFS_COMPILED)
#undef XGRAD_DETAIL_PARAMETER_REFS_COMPILED
#undef XGRAD_DETAIL_PARAMETER_REF_COMPILED
}  // namespace xgrad
