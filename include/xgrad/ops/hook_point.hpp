// hook_point: the op a module's forward marks a named point with (core/hooks.hpp). Without an active
// Hooks set it returns its input; otherwise the forward hooks matching the point's full name read
// the value or replace it, and when a backward hook matches, the value passes through a HookNode
// (one copy) whose backward hands dL/d(value) to those hooks before it flows on. patch_at builds a
// forward hook's replacement: the value with some slices taken from another run.
#pragma once
#include <any>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <typeinfo>

#include "xgrad/core/hooks.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape_view.hpp"

#include <xtensor/xstrided_view.hpp>

namespace xgrad {

namespace detail {
// HookCall::copy: the forward's value, the backward's gradient, as a std::any of xt::xtensor<T, N>.
template <Real T, std::size_t N>
std::any copy_hooked_value(const void* var) {
    return xt::xtensor<T, N>(static_cast<const Var<T, N>*>(var)->value());
}
template <Real T, std::size_t N>
std::any copy_hooked_array(const void* array) {
    return xt::xtensor<T, N>(*static_cast<const xt::xtensor<T, N>*>(array));
}
}  // namespace detail

// y = x (a copy); backward: the matching backward hooks read or change dY, then dX += dY.
template <Real T, std::size_t N>
class HookNode final : public OpNode<HookNode<T, N>, T, N> {
public:
    Var<T, N> x;
    const Hooks* hooks = nullptr;  // the set active at the forward: alive until this backward
    std::string name;              // the point's full name

    const char* op_name() const override { return "hook_point"; }
    auto inputs() { return std::tie(x); }

    void backward() override {
        xt::xtensor<T, N>& grad = this->grad_buffer();  // dL/d(value), every use's part summed
        HookCall call{name, HookPass::backward, &typeid(T), N, &grad, &detail::copy_hooked_array<T, N>};
        hooks->run(call);
        detail::flat_copy_backward(*this, x);
    }
};

// A named point in a module's forward: `x = hook_point(x, "hook_resid_pre");` Its full name is the
// open NameScopes' hook parts and `name`. Returns value, or what the forward hooks replaced it with.
template <Real T, std::size_t N>
Var<T, N> hook_point(const Var<T, N>& value, std::string_view name) {
    const Hooks* hooks = active_hooks();
    if (!hooks || !value) return value;
    const std::string full = hook_name(name);  // a hook may reach other points
    Var<T, N> out = value;
    if (hooks->wants(full, HookPass::forward)) {
        HookCall call{full, HookPass::forward, &typeid(T), N, &out, &detail::copy_hooked_value<T, N>};
        hooks->run(call);
    }
    if (grad_enabled() && out.requires_grad() && hooks->wants(full, HookPass::backward))
        out = make_op<HookNode<T, N>>(out.shape(), [&](auto& node) {
            node.hooks = hooks, node.name = full;
            detail::flat_copy(out.value().data(), out.size(), node.value.data());
        }, out);
    return out;
}

template <LazyExpression E>
auto hook_point(const E& value, std::string_view name) {
    return hook_point(eval(value), name);
}

// A patch: value with the elements at `index` taken from source (value's shape), where index[a] is
// an index along axis a, or -1 for all of it. On a (B, T, H, D) hook_z, {-1, -1, h, -1} patches head
// h at every position, {-1, t, h, -1} at position t only; on a (B, T, C) residual, {-1, t, -1}.
// No gradient reaches value's patched elements (the source is a constant).
template <Real T, std::size_t N>
Var<T, N> patch_at(const Var<T, N>& value, const xt::xtensor<T, N>& source, const std::array<long, N>& index) {
    if (source.shape() != value.shape())
        throw shape_error("patch_at: the source has shape " + shape_str(source.shape()) + " but the value " +
                          shape_str(value.shape()));
    xt::xstrided_slice_vector slices;
    for (std::size_t a = 0; a < N; ++a) {
        if (index[a] >= long(value.shape(a)) || index[a] < -1)
            throw shape_error("patch_at: index " + std::to_string(index[a]) + " on axis " + std::to_string(a) +
                              " of a value of shape " + shape_str(value.shape()));
        if (index[a] < 0) slices.push_back(xt::all());
        else slices.push_back(std::size_t(index[a]));
    }
    xt::xtensor<bool, N> mask = xt::zeros<bool>(value.shape());
    xt::strided_view(mask, slices) = true;
    return where(mask, constant(source), value);
}

}  // namespace xgrad
