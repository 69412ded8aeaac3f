// gradcheck: analytic gradients (the tape) against central finite differences, in double.
//
//   auto r = xgrad::gradcheck([](auto& a, auto& b) { return xgrad::sum(a * b); }, xa, xb);
//   if (!r.passed) std::cerr << r.report() << '\n';
//
// Full mode builds both Jacobians (one backward per output element, two forwards per input
// element); fast mode compares random projections v^T J u per input. It also fails when every
// analytic gradient is zero (a backward that writes nothing) and when backward does not
// accumulate (two backward calls must give twice the gradient), when the forward differs between
// grad mode and NoGrad, and when a second step on the cleared tape (reused node storage) gives a
// different gradient. Parameters that f captures (rather than takes as inputs) have their grad
// changed by the check: zero them afterwards if that matters.
//
// The checking itself is check/gradcheck_core.hpp; here is only the typed adapter between it and
// f, which is all that each checked function compiles.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "xgrad/check/gradcheck_core.hpp"
#include "xgrad/core/expr.hpp"

namespace xgrad {

namespace detail {

template <class R>
auto as_var(R&& r) {
    if constexpr (requires { r.node(); }) return std::forward<R>(r);
    else return eval(r);
}

// f and its inputs x_i (xt::xtensor<double, N_i>) behind GradcheckTarget.
template <class F, class... X>
class TypedGradcheckTarget final : public GradcheckTarget {
    using Params = std::tuple<Var<double, X::rank>...>;
    using Y = decltype(as_var(std::declval<F&>()(std::declval<const Var<double, X::rank>&>()...)));
    static constexpr std::size_t K = sizeof...(X);

public:
    TypedGradcheckTarget(F& f, std::tuple<X...> x) : f_(f), x_(std::move(x)) {}

    std::size_t inputs() const override { return K; }
    std::span<double> input(std::size_t i) override {
        return pick(x_, i, [](auto& xi) { return std::span<double>(xi.data(), xi.size()); });
    }
    std::vector<std::size_t> input_shape(std::size_t i) const override {
        return pick(x_, i, [](const auto& xi) { return std::vector<std::size_t>(xi.shape().begin(), xi.shape().end()); });
    }
    std::vector<double> forward_values() override {
        const NoGrad no_grad;
        const auto constants = std::apply([](const auto&... xi) { return std::make_tuple(constant(xi)...); }, x_);
        const Y y = call(constants);
        return std::vector<double>(y.value().begin(), y.value().end());
    }
    void record() override {
        params_ = std::apply([](const auto&... xi) { return std::make_tuple(parameter(xi)...); }, x_);
        record_again();
    }
    void record_again() override {
        y_ = call(*params_);
        seed_.resize(y_->shape());
    }
    bool output_requires_grad() const override { return y_->requires_grad(); }
    std::span<const double> output() const override { return {y_->value().data(), y_->size()}; }
    void backward(std::span<const double> seed) override {
        std::copy(seed.begin(), seed.end(), seed_.begin());
        xgrad::backward(*y_, seed_);
    }
    void zero_grads() override {
        std::apply([](auto&... p) { (p.zero_grad(), ...); }, *params_);
    }
    std::span<const double> grad(std::size_t i) const override {
        return pick(*params_, i, [](const auto& p) { return std::span<const double>(p.grad().data(), p.size()); });
    }

private:
    F& f_;
    std::tuple<X...> x_;
    std::optional<Params> params_;
    std::optional<Y> y_;
    xt::xtensor<double, Y::rank> seed_;

    template <class P>
    Y call(const P& params) {
        return std::apply([&](const auto&... p) { return as_var(f_(p...)); }, params);
    }
    // g(element i of the tuple), i known at run time.
    template <class Tuple, class G>
    static auto pick(Tuple& tuple, std::size_t i, G&& g) {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            std::optional<decltype(g(std::get<0>(tuple)))> out;
            ((I == i ? (out.emplace(g(std::get<I>(tuple))), 0) : 0), ...);
            return *out;
        }(std::make_index_sequence<K>{});
    }
};

template <class F, class... X>
GradcheckResult gradcheck_inputs(F& f, std::tuple<X...> inputs, const GradcheckOptions& opt) {
    TypedGradcheckTarget<F, X...> target(f, std::move(inputs));
    return GradientChecker(target, opt).run();
}

}  // namespace detail

// gradcheck(f, x1, x2, ..., [options]): f takes Var<double, Ni>... and returns a Var or an expression.
template <class F, class... Args>
GradcheckResult gradcheck(F&& f, const Args&... args) {
    auto all = std::forward_as_tuple(args...);
    using Last = std::decay_t<std::tuple_element_t<sizeof...(Args) - 1, std::tuple<Args...>>>;
    if constexpr (std::same_as<Last, GradcheckOptions>) {
        constexpr std::size_t K = sizeof...(Args) - 1;
        auto inputs = [&]<std::size_t... I>(std::index_sequence<I...>) {
            return std::make_tuple(xt::xtensor<double, std::decay_t<std::tuple_element_t<I, std::tuple<Args...>>>::rank>(
                std::get<I>(all))...);
        }(std::make_index_sequence<K>{});
        return detail::gradcheck_inputs(f, std::move(inputs), std::get<K>(all));
    } else {
        return detail::gradcheck_inputs(f, std::make_tuple(xt::xtensor<double, Args::rank>(args)...), GradcheckOptions{});
    }
}

}  // namespace xgrad
