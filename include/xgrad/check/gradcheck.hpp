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
// The checking itself is compiled in libxgrad (check/gradcheck_core.hpp declares it); here is the
// typed adapter between it and f: one class per signature (the inputs' ranks and the result's),
// and per checked function only its call.
#pragma once
#include <algorithm>
#include <concepts>
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

// A function of inputs x_i (xt::xtensor<double, N_i>) with a Var<double, M> result, behind
// GradcheckTarget: everything but the call of the function, so that the checked functions of one
// signature share it (each compiles only its call, below).
template <std::size_t M, std::size_t... N>
class GradcheckTargetOf : public GradcheckTarget {
public:
    using Inputs = std::tuple<xt::xtensor<double, N>...>;
    using Params = std::tuple<Var<double, N>...>;
    static constexpr std::size_t K = sizeof...(N);

    explicit GradcheckTargetOf(Inputs x) : x_(std::move(x)) {}

    std::size_t inputs() const override { return K; }
    std::span<double> input(std::size_t i) override {
        return pick(x_, i, [](auto& xi) { return std::span<double>(xi.data(), xi.size()); });
    }
    std::vector<std::size_t> input_shape(std::size_t i) const override {
        return pick(x_, i, [](const auto& xi) { return std::vector<std::size_t>(xi.shape().begin(), xi.shape().end()); });
    }
    std::vector<double> forward_values() override {
        const NoGrad no_grad;
        const Var<double, M> y = call(std::apply([](const auto&... xi) { return Params(constant(xi)...); }, x_));
        return std::vector<double>(y.value().begin(), y.value().end());
    }
    void record() override {
        params_ = std::apply([](const auto&... xi) { return Params(parameter(xi)...); }, x_);
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

protected:
    virtual Var<double, M> call(const Params& params) = 0;  // f(params...)

private:
    Inputs x_;
    std::optional<Params> params_;
    std::optional<Var<double, M>> y_;
    xt::xtensor<double, M> seed_;

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

// f's result as a Var (an expression materialized), for its inputs' ranks N...
template <class F, std::size_t... N>
using GradcheckResultVar = decltype(as_var(std::declval<F&>()(std::declval<const Var<double, N>&>()...)));

// f behind GradcheckTargetOf: its call, the one part compiled per checked function.
template <class F, std::size_t... N>
class TypedGradcheckTarget final : public GradcheckTargetOf<GradcheckResultVar<F, N...>::rank, N...> {
    using Base = GradcheckTargetOf<GradcheckResultVar<F, N...>::rank, N...>;
    static_assert(std::same_as<typename GradcheckResultVar<F, N...>::value_type, double>,
                  "xgrad: gradcheck's function must return a Var or an expression of double");

public:
    TypedGradcheckTarget(F& f, typename Base::Inputs x) : Base(std::move(x)), f_(f) {}

private:
    F& f_;
    Var<double, GradcheckResultVar<F, N...>::rank> call(const typename Base::Params& params) override {
        return std::apply([&](const auto&... p) { return as_var(f_(p...)); }, params);
    }
};

template <class F, class... X>
GradcheckResult gradcheck_inputs(F& f, std::tuple<X...> inputs, const GradcheckOptions& opt) {
    TypedGradcheckTarget<F, X::rank...> target(f, std::move(inputs));
    return check_gradients(target, opt);
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
