// Checks of a decoder's hook points (double): the residual stream's sums, and backward hooks against
// central differences, taken by a forward hook that moves one element of the point's value by ±eps.
#pragma once
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xmath.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/hooks.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::testing {

// Each block's resid_mid = resid_pre + attn_out, resid_post = resid_mid + mlp_out, and the next
// block's resid_pre = this one's resid_post, in a cache of every point.
inline void check_residual_sums(const ActivationCache& cache, std::size_t layers) {
    for (std::size_t l = 0; l < layers; ++l) {
        const std::string b = "blocks." + std::to_string(l) + ".";
        INFO(b);
        const auto& pre = cache.value<double, 3>(b + "hook_resid_pre");
        const auto& mid = cache.value<double, 3>(b + "hook_resid_mid");
        const auto& post = cache.value<double, 3>(b + "hook_resid_post");
        CHECK(xt::allclose(mid, pre + cache.value<double, 3>(b + "hook_attn_out"), 1e-12, 1e-12));
        CHECK(xt::allclose(post, mid + cache.value<double, 3>(b + "hook_mlp_out"), 1e-12, 1e-12));
        if (l + 1 < layers)
            CHECK(xt::allclose(cache.value<double, 3>("blocks." + std::to_string(l + 1) + ".hook_resid_pre"), post));
    }
}

// dL/d(value at `point`) (shape `shape`, rank N) from loss(), a Var<double, 0>.
template <std::size_t N, class Loss>
xt::xtensor<double, N> point_gradient_fd(const std::string& point, const std::vector<std::size_t>& shape, Loss loss) {
    xt::xtensor<double, N> g = xt::zeros<double>(shape);
    const double eps = 1e-6;
    for (std::size_t i = 0; i < g.size(); ++i) {
        double at[2];
        for (int side = 0; side < 2; ++side) {
            Hooks hooks;
            hooks.forward(point, [&](const Var<double, N>& v) {
                xt::xtensor<double, N> moved = v.value();
                moved.data()[i] += side == 0 ? eps : -eps;
                return Var<double, N>(v + constant(xt::xtensor<double, N>(moved - v.value())));
            });
            const UseHooks use(hooks);
            at[side] = loss().value()();
        }
        g.data()[i] = (at[0] - at[1]) / (2 * eps);
    }
    return g;
}

// At each point (rank 4 under `attn.`, else 3), the gradient a backward hook reads after
// backward(loss()) against point_gradient_fd: not all zero, within 1e-5 of its largest element.
template <class Loss>
void check_point_gradients(const std::vector<std::string>& points, Loss loss) {
    for (const std::string& point : points) {
        INFO(point);
        ActivationCache cache;
        Hooks hooks;
        cache.attach(hooks, point, true);
        Var<double, 0> value;
        {
            const UseHooks use(hooks);
            value = loss();
        }
        backward(value);
        const auto compare = [&](const auto& g, auto rank) {
            const auto fd = point_gradient_fd<decltype(rank)::value>(point, {g.shape().begin(), g.shape().end()}, loss);
            const double worst = xt::amax(xt::abs(g - fd))(), largest = xt::amax(xt::abs(g))();
            MESSAGE(point << ": largest |dL/dv| " << largest << ", largest error against finite differences " << worst);
            CHECK(largest > 1e-5);
            CHECK(worst < 1e-5 * largest);
        };
        if (point.find("attn.") != std::string::npos) compare(cache.grad<double, 4>(point), std::integral_constant<std::size_t, 4>{});
        else compare(cache.grad<double, 3>(point), std::integral_constant<std::size_t, 3>{});
    }
}

}  // namespace xgrad::testing
