// Modules: plain structs whose parameters and submodules are reflected with Boost.Hana.
//
//   template <Real T> struct Block {
//       BOOST_HANA_DEFINE_STRUCT(Block, (Linear<T>, proj), (std::vector<Linear<T>>, layers), (Var<T, 1>, scale));
//       bool training = true;   // optional; set_training(m, bool) sets it
//   };
//
// One walk (for_each_parameter) yields PyTorch's dotted names — "proj.weight", "layers.0.bias",
// "scale" — and everything else (named_parameters, zero_grad, set_training, parameter_count,
// state dicts, optimizers) is built on it. Empty Vars (an absent bias) are skipped.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include <boost/hana.hpp>

#include "xgrad/core/var.hpp"

namespace xgrad {

namespace detail {
template <class X>
struct is_var : std::false_type {};
template <Real T, std::size_t N>
struct is_var<Var<T, N>> : std::true_type {};
template <class X>
struct is_vector : std::false_type {};
template <class X, class A>
struct is_vector<std::vector<X, A>> : std::true_type {};
}  // namespace detail

template <class M>
concept Module = boost::hana::Struct<M>::value;

// Calls f(name, var) for every parameter (non-empty Var) of m and of its submodules, recursively,
// in declaration order. Works on const and non-const modules.
template <class M, class F>
    requires Module<std::remove_const_t<M>>
void for_each_parameter(M& m, F&& f, const std::string& prefix = "") {
    boost::hana::for_each(boost::hana::accessors<std::remove_const_t<M>>(), [&](auto pair) {
        const std::string name = prefix + boost::hana::to<const char*>(boost::hana::first(pair));
        auto& member = boost::hana::second(pair)(m);
        using X = std::remove_cvref_t<decltype(member)>;
        if constexpr (detail::is_var<X>::value) {
            if (member) f(name, member);
        } else if constexpr (Module<X>) {
            for_each_parameter(member, f, name + ".");
        } else if constexpr (detail::is_vector<X>::value) {
            for (std::size_t i = 0; i < member.size(); ++i) {
                if constexpr (detail::is_var<typename X::value_type>::value) {
                    if (member[i]) f(name + "." + std::to_string(i), member[i]);
                } else {
                    for_each_parameter(member[i], f, name + "." + std::to_string(i) + ".");
                }
            }
        }
    });
}

// Calls f(module) for m and every submodule (pre-order).
template <class M, class F>
    requires Module<M>
void for_each_module(M& m, F&& f) {
    f(m);
    boost::hana::for_each(boost::hana::accessors<M>(), [&](auto pair) {
        auto& member = boost::hana::second(pair)(m);
        using X = std::remove_cvref_t<decltype(member)>;
        if constexpr (Module<X>) {
            for_each_module(member, f);
        } else if constexpr (detail::is_vector<X>::value) {
            if constexpr (Module<typename X::value_type>)
                for (auto& sub : member) for_each_module(sub, f);
        }
    });
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

template <Real T, class M>
    requires Module<M>
std::vector<ParameterRef<T>> named_parameters(M& m) {
    std::vector<ParameterRef<T>> out;
    for_each_parameter(m, [&](const std::string& name, auto& var) {
        using V = std::remove_cvref_t<decltype(var)>;
        static_assert(std::same_as<typename V::value_type, T>, "xgrad: named_parameters<T>: a parameter has another dtype");
        ParameterRef<T> p;
        p.name = name;
        p.shape.assign(var.shape().begin(), var.shape().end());
        p.value = var.value().data();
        p.size = var.size();
        V handle = var;
        p.grad = [handle]() -> const T* { return handle.has_grad() ? handle.grad().data() : nullptr; };
        p.mutable_grad = [handle]() -> T* {
            return handle.has_grad() ? handle.node()->grad_buffer().data() : nullptr;
        };
        p.zero_grad = [handle] { handle.zero_grad(); };
        p.node = var.node();
        out.push_back(std::move(p));
    });
    return out;
}

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
