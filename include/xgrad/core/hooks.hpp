// Hooks: code of the user's that runs at a named point inside a model's forward or backward. A
// module marks a point with hook_point(value, "hook_resid_pre") in its forward (ops/hook_point.hpp);
// its full name is the open NameScopes' hook parts and that name ("blocks.0.hook_resid_pre"). While
// a UseHooks scope makes a Hooks set active on the thread, every point whose name matches one of its
// patterns hands its value to the forward hooks (which read it or return a replacement: a patch) and,
// in the backward, dL/d(value) to the backward hooks (which read it or change it in place).
// ActivationCache keeps the values and gradients of the points it matches. With no set active a
// point costs a thread-local read: the model runs what it runs without hooks.
//
//   xgrad::Hooks hooks;
//   hooks.forward("blocks.*.attn.hook_z", [&](const xgrad::Var<float, 4>& z, std::string_view name) { ... });
//   { xgrad::UseHooks use(hooks); loss = model.loss(idx, targets); }
//   xgrad::backward(loss);  // backward hooks run here: `hooks` must outlive the backward
#pragma once
#include <any>
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "xgrad/core/error.hpp"
#include "xgrad/core/names.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad {

enum class HookPass { forward, backward };

// A hook point's call of the hooks, its value's type erased: forward, target is the Var<T, N> the
// model goes on with (a hook may assign another of the same shape); backward, the
// xt::xtensor<T, N> holding dL/d(value) (a hook may change its elements). copy(target) gives the
// value's array (forward) or the gradient (backward) as a std::any holding an xt::xtensor<T, N>.
struct HookCall {
    std::string_view name;
    HookPass pass;
    const std::type_info* element;  // typeid(float) or typeid(double)
    std::size_t rank;
    void* target;
    std::any (*copy)(const void* target);
};

// "float32 rank 4": a hook point's or a hook's type, for messages.
inline std::string hook_type_str(const std::type_info& element, std::size_t rank) {
    return std::string(element == typeid(float) ? "float32" : "float64") + " rank " + std::to_string(rank);
}

// Does name match pattern? `*` matches any run of characters (dots too): "blocks.*.attn.hook_z".
inline bool hook_name_matches(std::string_view pattern, std::string_view name) {
    std::size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
    while (n < name.size()) {
        if (p < pattern.size() && pattern[p] == '*') star = p++, resume = n;
        else if (p < pattern.size() && pattern[p] == name[n]) ++p, ++n;
        else if (star != std::string_view::npos) p = star + 1, n = ++resume;
        else return false;
    }
    while (p < pattern.size() && pattern[p] == '*') ++p;
    return p == pattern.size();
}

namespace detail {
// The Var<T, N> or xt::xtensor<T, N> a typed hook takes as its first argument.
template <class F>
struct hook_argument : hook_argument<decltype(&F::operator())> {};
template <class C, class R, class A, class... Rest>
struct hook_argument<R (C::*)(A, Rest...) const> {
    using type = std::remove_cvref_t<A>;
};
template <class C, class R, class A, class... Rest>
struct hook_argument<R (C::*)(A, Rest...)> {
    using type = std::remove_cvref_t<A>;
};
template <class R, class A, class... Rest>
struct hook_argument<R (*)(A, Rest...)> {
    using type = std::remove_cvref_t<A>;
};
template <class A>
struct hook_operand;  // element type and rank of a hook's argument
template <class T, std::size_t N>
struct hook_operand<Var<T, N>> {
    using element = T;
    static constexpr std::size_t rank = N;
};
template <class T, std::size_t N>
struct hook_operand<xt::xtensor<T, N>> {
    using element = T;
    static constexpr std::size_t rank = N;
};
// fn(arg, name) or fn(arg)
template <class F, class A>
decltype(auto) call_hook(F& fn, A& arg, std::string_view name) {
    if constexpr (std::is_invocable_v<F&, A&, std::string_view>) return fn(arg, name);
    else return fn(arg);
}
}  // namespace detail

class Hooks {
public:
    // fn(const Var<T, N>& value[, std::string_view name]) at every point whose name matches pattern:
    // returns nothing (reads the value) or a Var<T, N> of the same shape, which the model uses
    // instead (an activation patch; ops/hook_point.hpp has helpers for one head or position).
    template <class F>
    Hooks& forward(std::string pattern, F fn) {
        using Arg = typename detail::hook_argument<F>::type;
        using Op = detail::hook_operand<Arg>;
        return add(std::move(pattern), HookPass::forward, &typeid(typename Op::element), Op::rank,
                   [fn = std::move(fn)](HookCall& c) mutable {
                       Arg& value = *static_cast<Arg*>(c.target);
                       if constexpr (std::is_void_v<decltype(detail::call_hook(fn, value, c.name))>)
                           detail::call_hook(fn, value, c.name);
                       else {
                           Arg replacement = detail::call_hook(fn, value, c.name);
                           if (!replacement || replacement.shape() != value.shape())
                               throw shape_error("hook " + std::string(c.name) + ": the hook returned " +
                                                 (replacement ? shape_str(replacement.shape()) : "an empty Var") +
                                                 " for a value of " + shape_str(value.shape()));
                           value = std::move(replacement);
                       }
                   });
    }
    // fn(xt::xtensor<T, N>& grad[, std::string_view name]) in the backward, at every point whose
    // name matches pattern: grad is dL/d(value), all of it (every use of the value has passed its
    // part back); the hook reads it or changes its elements, and the changed gradient flows on.
    template <class F>
    Hooks& backward(std::string pattern, F fn) {
        using Arg = typename detail::hook_argument<F>::type;
        using Op = detail::hook_operand<Arg>;
        return add(std::move(pattern), HookPass::backward, &typeid(typename Op::element), Op::rank,
                   [fn = std::move(fn)](HookCall& c) mutable {
                       detail::call_hook(fn, *static_cast<Arg*>(c.target), c.name);
                   });
    }
    // A hook that takes any point's type (element nullptr): fn reads the HookCall (ActivationCache's).
    Hooks& add(std::string pattern, HookPass pass, const std::type_info* element, std::size_t rank,
               std::function<void(HookCall&)> fn) {
        entries_.push_back({std::move(pattern), pass, element, rank, std::move(fn)});
        return *this;
    }
    Hooks& add(std::string pattern, HookPass pass, std::function<void(HookCall&)> fn) {
        return add(std::move(pattern), pass, nullptr, 0, std::move(fn));
    }
    void clear() { entries_.clear(); }
    bool empty() const { return entries_.empty(); }

    // Does a hook of this pass (or of either) match the full name?
    bool wants(std::string_view name, HookPass pass) const {
        for (const auto& e : entries_)
            if (e.pass == pass && hook_name_matches(e.pattern, name)) return true;
        return false;
    }
    bool wants(std::string_view name) const {
        return wants(name, HookPass::forward) || wants(name, HookPass::backward);
    }
    // Runs the matching hooks of call.pass in the order they were added; a typed hook on a point of
    // another type is a value_error naming both.
    void run(HookCall& call) const {
        for (const auto& e : entries_) {
            if (e.pass != call.pass || !hook_name_matches(e.pattern, call.name)) continue;
            if (e.element && (*e.element != *call.element || e.rank != call.rank))
                throw value_error("hook " + std::string(call.name) + ": the point holds a " +
                                  hook_type_str(*call.element, call.rank) + " value; the hook (pattern \"" + e.pattern +
                                  "\") takes " + hook_type_str(*e.element, e.rank));
            e.fn(call);
        }
    }

private:
    struct Entry {
        std::string pattern;
        HookPass pass;
        const std::type_info* element;
        std::size_t rank;
        std::function<void(HookCall&)> fn;
    };
    std::vector<Entry> entries_;
};

namespace detail {
inline const Hooks*& active_hooks_slot() {
    thread_local const Hooks* active = nullptr;
    return active;
}
}  // namespace detail

// The set of hooks active on this thread, or nullptr.
inline const Hooks* active_hooks() { return detail::active_hooks_slot(); }

// Makes `hooks` active on this thread while it lives (the set active before comes back after).
class UseHooks {
public:
    explicit UseHooks(const Hooks& hooks) : before_(detail::active_hooks_slot()) { detail::active_hooks_slot() = &hooks; }
    ~UseHooks() { detail::active_hooks_slot() = before_; }
    UseHooks(const UseHooks&) = delete;
    UseHooks& operator=(const UseHooks&) = delete;

private:
    const Hooks* before_;
};

// The full name of a hook point called `name` under the open NameScopes (a thread-local buffer,
// rewritten by the next call).
inline const std::string& hook_name(std::string_view name) {
    thread_local std::string full;
    write_path(full, NameScope::hook_parts(), name);
    return full;
}

// Would a point called `name` here run a hook? For a model that forms a value only to hook it
// (an attention's heads, which its fast paths read in place).
inline bool hook_wanted(std::string_view name) {
    const Hooks* hooks = active_hooks();
    return hooks && hooks->wants(hook_name(name));
}

// The values (and, asked, the gradients) of the hook points whose names match a pattern, kept as
// xt::xtensor<T, N> copies under their full names. attach() adds the hooks that fill it to a set;
// the cache must outlive the forward and, with gradients, the backward. A point reached twice keeps
// the last value.
class ActivationCache {
public:
    void attach(Hooks& hooks, std::string pattern = "*", bool gradients = false) {
        hooks.add(pattern, HookPass::forward, [this](HookCall& c) { store(values_, c); });
        if (gradients) hooks.add(std::move(pattern), HookPass::backward, [this](HookCall& c) { store(grads_, c); });
    }
    template <class T, std::size_t N>
    const xt::xtensor<T, N>& value(std::string_view name) const {
        return find<T, N>(values_, name, "value");
    }
    template <class T, std::size_t N>
    const xt::xtensor<T, N>& grad(std::string_view name) const {
        return find<T, N>(grads_, name, "gradient");
    }
    bool has_value(std::string_view name) const { return values_.find(name) != values_.end(); }
    bool has_grad(std::string_view name) const { return grads_.find(name) != grads_.end(); }
    // The names of the kept values, in the order the forward first reached them.
    const std::vector<std::string>& names() const { return order_; }
    void clear() { values_.clear(), grads_.clear(), order_.clear(); }

private:
    using Store = std::map<std::string, std::any, std::less<>>;
    void store(Store& s, const HookCall& c) {
        auto [it, added] = s.try_emplace(std::string(c.name));
        it->second = c.copy(c.target);
        if (added && &s == &values_) order_.push_back(it->first);
    }
    template <class T, std::size_t N>
    static const xt::xtensor<T, N>& find(const Store& s, std::string_view name, const char* what) {
        const auto it = s.find(name);
        if (it == s.end()) throw value_error("ActivationCache: no " + std::string(what) + " kept for " + std::string(name));
        const auto* a = std::any_cast<xt::xtensor<T, N>>(&it->second);
        if (!a)
            throw value_error("ActivationCache: " + std::string(name) + "'s " + what + " is not " +
                              hook_type_str(typeid(T), N));
        return *a;
    }
    Store values_, grads_;
    std::vector<std::string> order_;
};

}  // namespace xgrad
