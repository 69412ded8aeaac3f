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
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/expr.hpp"

namespace xgrad {

struct GradcheckOptions {
    double eps = 1e-6;   // finite-difference step
    double atol = 1e-5;  // pass when |analytic - numeric| <= atol + rtol * |numeric| (PyTorch's test)
    double rtol = 1e-3;
    enum class Mode { automatic, full, fast } mode = Mode::automatic;
    std::size_t full_limit = 20000;  // automatic: full when inputs x outputs elements <= this
    int projections = 4;             // fast mode: random (v, u) pairs per input
    std::uint64_t seed = 20240611;
    bool check_accumulation = true;
    bool allow_zero_grad = false;  // set for functions whose true gradient is zero at this point
};

struct GradcheckResult {
    bool passed = true;
    std::string mode;  // "full" or "fast"
    double max_abs_error = 0, max_rel_error = 0;
    // The worst element: which input, where (index, or projection number in fast mode), values.
    std::size_t worst_input = 0;
    std::string worst_where;
    double analytic = 0, numeric = 0;
    std::string failure;  // why it failed; empty when passed

    std::string report() const {
        std::ostringstream os;
        os << (passed ? "gradcheck passed" : "gradcheck FAILED") << " (" << mode << "): max abs error "
           << max_abs_error << ", max rel error " << max_rel_error << "; worst: input " << worst_input << ' '
           << worst_where << " analytic " << analytic << " numeric " << numeric;
        if (!failure.empty()) os << "; " << failure;
        return os.str();
    }
};

namespace detail {

template <class R>
auto as_var(R&& r) {
    if constexpr (requires { r.node(); }) return std::forward<R>(r);
    else return eval(r);
}

template <class Inputs>
struct GradChecker {
    using Opt = GradcheckOptions;
    static constexpr std::size_t K = std::tuple_size_v<Inputs>;
    Inputs x;
    Opt opt;
    GradcheckResult res;
    std::mt19937_64 rng;

    template <class F>
    auto call(F& f, const auto& params) {
        return std::apply([&](const auto&... p) { return as_var(f(p...)); }, params);
    }
    auto make_params() {
        return std::apply([](const auto&... xi) { return std::make_tuple(parameter(xi)...); }, x);
    }
    template <class F>
    auto forward_values(F& f) {  // f(x) without recording
        NoGrad ng;
        auto params = std::apply([](const auto&... xi) { return std::make_tuple(constant(xi)...); }, x);
        return xt::xtensor<double, std::decay_t<decltype(call(f, params))>::rank>(call(f, params).value());
    }

    // The worst element is the one furthest past its tolerance (NaN counts as infinitely far).
    double worst_score = -std::numeric_limits<double>::infinity();

    void compare(std::size_t input, const std::string& where, double a, double n) {
        const double err = std::abs(a - n);
        const double allowed = opt.atol + opt.rtol * std::abs(n);
        const bool ok = err <= allowed;  // NaN fails
        const double score = ok ? err - allowed : (err == err ? err - allowed : std::numeric_limits<double>::infinity());
        if (err == err) {
            res.max_abs_error = std::max(res.max_abs_error, err);
            if (std::abs(n) > opt.atol) res.max_rel_error = std::max(res.max_rel_error, err / std::abs(n));
        } else {
            res.max_abs_error = res.max_rel_error = err;
        }
        if (score > worst_score || res.worst_where.empty()) {
            worst_score = score;
            res.worst_input = input, res.worst_where = where, res.analytic = a, res.numeric = n;
        }
        if (!ok) {
            res.passed = false;
            std::ostringstream os;
            os << "mismatch at input " << res.worst_input << ' ' << res.worst_where
               << ": |analytic - numeric| = " << std::abs(res.analytic - res.numeric)
               << " > atol + rtol*|numeric| = " << opt.atol + opt.rtol * std::abs(res.numeric);
            res.failure = os.str();
        }
    }
    void fail(const std::string& why) {
        if (res.passed) res.failure = why;
        res.passed = false;
    }

    template <class F>
    void run(F& f) {
        Tape local;
        TapeScope scope(local);
        auto params = make_params();
        auto y = call(f, params);
        using Y = decltype(y);
        if (!y.requires_grad()) return fail("the output does not depend on any input");
        const std::size_t m = y.size();
        std::size_t n = 0;
        std::apply([&](const auto&... xi) { ((n += xi.size()), ...); }, x);
        const bool full = opt.mode == Opt::Mode::full ||
                          (opt.mode == Opt::Mode::automatic && n * m <= opt.full_limit);
        res.mode = full ? "full" : "fast";
        bool any_nonzero = false;
        auto zero_all = [&] { std::apply([](auto&... p) { (p.zero_grad(), ...); }, params); };
        xt::xtensor<double, Y::rank> seed = xt::zeros<double>(y.shape());

        if (full) {
            // analytic Jacobian rows: one backward per output element
            std::vector<std::vector<double>> rows(m);
            for (std::size_t j = 0; j < m; ++j) {
                zero_all();
                seed.fill(0);
                seed.data()[j] = 1;
                backward(y, seed);
                std::apply([&](const auto&... p) { (append(rows[j], p.grad()), ...); }, params);
                for (double g : rows[j]) any_nonzero |= g != 0;
            }
            // numeric Jacobian columns: perturb each input element
            std::size_t col = 0;
            for_each_input([&](auto& xi, std::size_t input) {
                for (std::size_t k = 0; k < xi.size(); ++k, ++col) {
                    const double keep = xi.data()[k];
                    xi.data()[k] = keep + opt.eps;
                    auto plus = forward_values(f);
                    xi.data()[k] = keep - opt.eps;
                    auto minus = forward_values(f);
                    xi.data()[k] = keep;
                    for (std::size_t j = 0; j < m; ++j) {
                        const double num = (plus.data()[j] - minus.data()[j]) / (2 * opt.eps);
                        compare(input, "index " + unravel(xi.shape(), k) + " output " + std::to_string(j), rows[j][col],
                                num);
                    }
                }
            });
        } else {
            std::normal_distribution<double> normal;
            for_each_input([&](auto& xi, std::size_t input) {
                using XT = std::decay_t<decltype(xi)>;
                for (int p = 0; p < opt.projections; ++p) {
                    for (auto& s : seed) s = normal(rng);
                    XT u(xi.shape());
                    for (auto& s : u) s = normal(rng);
                    zero_all();
                    backward(y, seed);
                    double analytic = 0;
                    std::apply(
                        [&](const auto&... pr) {
                            std::size_t i = 0;
                            ((i++ == input ? (analytic = dot_same(pr.grad(), u), 0) : 0), ...);
                        },
                        params);
                    any_nonzero |= analytic != 0;
                    const XT keep = xi;
                    xi = keep + opt.eps * u;
                    auto plus = forward_values(f);
                    xi = keep - opt.eps * u;
                    auto minus = forward_values(f);
                    xi = keep;
                    double numeric = 0;
                    for (std::size_t j = 0; j < m; ++j)
                        numeric += seed.data()[j] * (plus.data()[j] - minus.data()[j]) / (2 * opt.eps);
                    compare(input, "projection " + std::to_string(p), analytic, numeric);
                }
            });
        }
        if (!any_nonzero && !opt.allow_zero_grad)
            fail("the analytic gradient is all zero (backward wrote nothing?)");
        const auto plain = forward_values(f);
        for (std::size_t j = 0; j < m; ++j)
            if (!(std::abs(plain.data()[j] - y.value().data()[j]) <= opt.atol))
                return fail("the forward value differs between grad mode and NoGrad at output " + std::to_string(j));
        if (opt.check_accumulation) check_accumulation(y, params, seed);
        check_reuse(f, local, params, seed);
    }

    // A second step on the cleared tape reuses every node's storage; it must give the same gradient.
    template <class F, class P, class S>
    void check_reuse(F& f, Tape& local, P& params, S& seed) {
        std::apply([](auto&... p) { (p.zero_grad(), ...); }, params);
        backward(call(f, params), seed);
        std::vector<double> first, second;
        std::apply([&](const auto&... p) { (append(first, p.grad()), ...); }, params);
        local.clear();
        std::apply([](auto&... p) { (p.zero_grad(), ...); }, params);
        backward(call(f, params), seed);
        std::apply([&](const auto&... p) { (append(second, p.grad()), ...); }, params);
        for (std::size_t i = 0; i < first.size(); ++i)
            if (!(std::abs(second[i] - first[i]) <= 1e-12 * (1 + std::abs(first[i]))))
                return fail("a step on the cleared tape (reused node storage) gave a different gradient");
    }

    template <class Y, class P, class S>
    void check_accumulation(Y& y, P& params, S& seed) {
        std::normal_distribution<double> normal;
        for (auto& s : seed) s = normal(rng);
        std::apply([](auto&... p) { (p.zero_grad(), ...); }, params);
        backward(y, seed);
        std::vector<double> once, twice;
        std::apply([&](const auto&... p) { (append(once, p.grad()), ...); }, params);
        backward(y, seed);
        std::apply([&](const auto&... p) { (append(twice, p.grad()), ...); }, params);
        for (std::size_t i = 0; i < once.size(); ++i)
            if (std::abs(twice[i] - 2 * once[i]) > 1e-9 * (1 + std::abs(once[i])))
                return fail("backward does not accumulate: a second backward gave " + std::to_string(twice[i]) +
                            " instead of twice " + std::to_string(once[i]));
    }

    template <class G>
    void for_each_input(G&& g) {
        std::apply(
            [&](auto&... xi) {
                std::size_t i = 0;
                (g(xi, i++), ...);
            },
            x);
    }
    template <class A>
    static void append(std::vector<double>& v, const A& a) {
        v.insert(v.end(), a.begin(), a.end());
    }
    template <class A, class B>
    static double dot_same(const A& a, const B& b) {
        double s = 0;
        for (std::size_t i = 0; i < a.size(); ++i) s += a.data()[i] * b.data()[i];
        return s;
    }
    template <class S>
    static std::string unravel(const S& shape, std::size_t flat) {
        std::vector<std::size_t> idx(shape.size());
        for (std::size_t k = shape.size(); k-- > 0;) idx[k] = flat % shape[k], flat /= shape[k];
        return shape_str(idx);
    }
};

template <class F, class Tuple, std::size_t... I>
GradcheckResult gradcheck_tuple(F& f, Tuple inputs, const GradcheckOptions& opt, std::index_sequence<I...>) {
    GradChecker<std::tuple<std::tuple_element_t<I, Tuple>...>> c{std::move(inputs), opt, {}, std::mt19937_64(opt.seed)};
    c.run(f);
    return c.res;
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
        return detail::gradcheck_tuple(f, std::move(inputs), std::get<K>(all), std::make_index_sequence<K>{});
    } else {
        auto inputs = std::make_tuple(xt::xtensor<double, Args::rank>(args)...);
        return detail::gradcheck_tuple(f, std::move(inputs), GradcheckOptions{},
                                       std::make_index_sequence<sizeof...(Args)>{});
    }
}

}  // namespace xgrad
