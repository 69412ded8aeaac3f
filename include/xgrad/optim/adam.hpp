// Adam and AdamW, torch 1.13's single-tensor update (torch/optim/adam.py, adamw.py), per parameter:
//   g = maximize ? -grad : grad
//   Adam:  g += weight_decay · p            (L2 penalty folded into the gradient)
//   AdamW: p *= 1 − lr · weight_decay       (decoupled decay)
//   m = β1·m + (1−β1)·g;   v = β2·v + (1−β2)·g²;   step += 1
//   v̂ = amsgrad ? (v_max = max(v_max, v)) : v
//   p −= lr / (1 − β1^step) · m / (sqrt(v̂) / sqrt(1 − β2^step) + eps)      (eps outside the sqrt)
// The division by sqrt(1 − β2^step) is a multiplication by its reciprocal: within an ulp of
// torch's division, and one division less per element (the update is bound by sqrt and division).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim {

struct AdamOptions {
    double lr = 1e-3;
    std::pair<double, double> betas{0.9, 0.999};
    double eps = 1e-8;
    double weight_decay = 0;
    bool amsgrad = false;
    bool maximize = false;
};

// The same fields; only weight_decay's default differs (torch.optim.AdamW).
struct AdamWOptions {
    double lr = 1e-3;
    std::pair<double, double> betas{0.9, 0.999};
    double eps = 1e-8;
    double weight_decay = 1e-2;
    bool amsgrad = false;
    bool maximize = false;
};

// One parameter's state, shaped like the parameter (torch's state[p]).
template <Real T>
struct AdamState {
    std::int64_t step = 0;
    xt::xarray<T> exp_avg, exp_avg_sq;
    std::optional<xt::xarray<T>> max_exp_avg_sq;  // only with amsgrad
};

namespace detail {

// Calls f.template operator()<b...>() with runtime bools as template arguments.
template <bool... Fixed, class F>
void with_flags(F& f) {
    f.template operator()<Fixed...>();
}
template <bool... Fixed, class F, class... Rest>
void with_flags(F& f, bool first, Rest... rest) {
    if (first) with_flags<Fixed..., true>(f, rest...);
    else with_flags<Fixed..., false>(f, rest...);
}

template <Real T, class Options, bool Decoupled>
class AdamFamily : public Optimizer<T> {
public:
    using State = std::map<std::string, AdamState<T>>;  // parameter name -> state

    explicit AdamFamily(std::vector<ParameterRef<T>> params, Options options = {});
    template <class M>
        requires Module<M>
    explicit AdamFamily(M& model, Options options = {}) : AdamFamily(named_parameters<T>(model), options) {}
    // Groups with their own lr or weight_decay (optim/optimizer.hpp; weight_decay_groups).
    explicit AdamFamily(std::vector<ParamGroup<T>> groups, Options options = {});
    ~AdamFamily() override;

    void step() override;

    double lr() const override { return options_.lr; }
    void set_lr(double lr) override {
        detail::check_lr(lr, name());
        options_.lr = lr;
        this->clear_group_lrs();
    }
    Options& options() { return options_; }
    const Options& options() const { return options_; }

    // Per-parameter state by name: only parameters that have been stepped have an entry.
    const State& state() const { return state_; }
    // Restores a checkpointed state(): every name must be a parameter, every buffer its shape.
    void load_state(const State& state);

    static const char* name() { return Decoupled ? "AdamW" : "Adam"; }

private:
    Options options_;
    State state_;

    struct Scalars {
        T neg_step_size, inv_bc2_sqrt, eps, beta1, beta2, one_minus_b1, one_minus_b2, wd, decay;
    };
    // The update of one parameter; every pointer is its (size,) flat view.
    template <bool Maximize, bool L2, bool Ams>
    static void update(T* __restrict w, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
                       std::size_t size, const Scalars& c) {
        for (std::size_t i = 0; i < size; ++i) {
            T gi = Maximize ? -g[i] : g[i];
            if constexpr (Decoupled) w[i] *= c.decay;
            if constexpr (L2) gi = gi + c.wd * w[i];
            m[i] = m[i] * c.beta1 + c.one_minus_b1 * gi;
            v[i] = v[i] * c.beta2 + c.one_minus_b2 * gi * gi;
            T second = v[i];
            if constexpr (Ams) {
                if (!(vmax[i] >= v[i])) vmax[i] = v[i];  // torch.maximum: NaN propagates
                second = vmax[i];
            }
            const T denom = std::sqrt(second) * c.inv_bc2_sqrt + c.eps;
            w[i] = w[i] + c.neg_step_size * m[i] / denom;
        }
    }

    AdamState<T>& state_for(const ParameterRef<T>& p);
    void validate() const;
};

// ---- out of the class: libxgrad compiles them once for float and double (XGRAD_COMPILED_IN below) ----

template <Real T, class Options, bool Decoupled>
AdamFamily<T, Options, Decoupled>::AdamFamily(std::vector<ParameterRef<T>> params, Options options)
    : Optimizer<T>(std::move(params), name()), options_(options) {
    validate();
}
template <Real T, class Options, bool Decoupled>
AdamFamily<T, Options, Decoupled>::AdamFamily(std::vector<ParamGroup<T>> groups, Options options)
    : Optimizer<T>(std::move(groups), name()), options_(options) {
    validate();
}
template <Real T, class Options, bool Decoupled>
AdamFamily<T, Options, Decoupled>::~AdamFamily() = default;

template <Real T, class Options, bool Decoupled>
void AdamFamily<T, Options, Decoupled>::step() {
    validate();
    const Options& o = options_;
    const double b1 = o.betas.first, b2 = o.betas.second;
    for (std::size_t i = 0; i < this->params_.size(); ++i) {
        auto& p = this->params_[i];
        const T* g = p.grad ? p.grad() : nullptr;
        if (!g) continue;
        AdamState<T>& s = state_for(p);
        ++s.step;
        const double lr = this->lr_of(i, o.lr), weight_decay = this->weight_decay_of(i, o.weight_decay);
        const double bc1 = 1 - std::pow(b1, double(s.step)), bc2 = 1 - std::pow(b2, double(s.step));
        const T neg_step_size = T(-(lr / bc1)), inv_bc2_sqrt = T(1 / std::sqrt(bc2)), eps = T(o.eps);
        const T beta1 = T(b1), beta2 = T(b2), one_minus_b1 = T(1 - b1), one_minus_b2 = T(1 - b2);
        const T wd = T(weight_decay), decay = T(1 - lr * weight_decay);
        const Scalars sc{neg_step_size, inv_bc2_sqrt, eps, beta1, beta2, one_minus_b1, one_minus_b2, wd, decay};
        T* vmax = o.amsgrad ? s.max_exp_avg_sq->data() : nullptr;
        // One loop per variant, without branches inside, so the compiler vectorizes it; large
        // parameters split over xgrad's threads (elementwise: the result does not depend on them).
        auto run = [&]<bool Maximize, bool L2, bool Ams>() {
            T *m = s.exp_avg.data(), *v = s.exp_avg_sq.data();
            parallel_for(p.size, 16.0 * double(p.size), [&](std::size_t b, std::size_t e) {
                update<Maximize, L2, Ams>(p.value + b, g + b, m + b, v + b, vmax ? vmax + b : nullptr, e - b, sc);
            });
        };
        with_flags(run, o.maximize, !Decoupled && weight_decay != 0, vmax != nullptr);
    }
}

template <Real T, class Options, bool Decoupled>
void AdamFamily<T, Options, Decoupled>::load_state(const State& state) {
    for (const auto& [pname, s] : state) {
        const auto& p = detail::state_owner(this->params_, pname, name());
        detail::check_buffer(p, s.exp_avg, name(), "exp_avg");
        detail::check_buffer(p, s.exp_avg_sq, name(), "exp_avg_sq");
        if (s.max_exp_avg_sq) detail::check_buffer(p, *s.max_exp_avg_sq, name(), "max_exp_avg_sq");
        if (s.step < 0)
            throw value_error(std::string(name()) + ": load_state: step of \"" + pname + "\" is negative");
    }
    state_ = state;
}

template <Real T, class Options, bool Decoupled>
AdamState<T>& AdamFamily<T, Options, Decoupled>::state_for(const ParameterRef<T>& p) {
    auto [it, fresh] = state_.try_emplace(p.name);
    AdamState<T>& s = it->second;
    if (fresh) s.exp_avg = zeros_like(p), s.exp_avg_sq = zeros_like(p);
    if (options_.amsgrad && !s.max_exp_avg_sq) s.max_exp_avg_sq = zeros_like(p);
    if (s.exp_avg.size() != p.size)
        throw shape_error(std::string(name()) + ": the state of \"" + p.name + "\" has shape " +
                          shape_str(s.exp_avg.shape()) + " but the parameter now has shape " +
                          shape_str(p.shape));
    return s;
}

template <Real T, class Options, bool Decoupled>
void AdamFamily<T, Options, Decoupled>::validate() const {
    const Options& o = options_;
    const std::string op = name();
    detail::check_lr(o.lr, name());
    if (!(o.eps >= 0)) throw value_error(op + ": eps must be >= 0, got " + std::to_string(o.eps));
    if (!(o.betas.first >= 0 && o.betas.first < 1))
        throw value_error(op + ": betas.first must be in [0, 1), got " + std::to_string(o.betas.first));
    if (!(o.betas.second >= 0 && o.betas.second < 1))
        throw value_error(op + ": betas.second must be in [0, 1), got " + std::to_string(o.betas.second));
    if (!(o.weight_decay >= 0))
        throw value_error(op + ": weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
}

}  // namespace detail

// torch.optim.Adam (L2 weight decay added to the gradient).
template <Real T>
class Adam : public detail::AdamFamily<T, AdamOptions, false> {
public:
    using detail::AdamFamily<T, AdamOptions, false>::AdamFamily;
    ~Adam() override;
};

// torch.optim.AdamW (decoupled weight decay, default 1e-2).
template <Real T>
class AdamW : public detail::AdamFamily<T, AdamWOptions, true> {
public:
    using detail::AdamFamily<T, AdamWOptions, true>::AdamFamily;
    ~AdamW() override;
};

// Adam(model, {...}) and Adam(named_parameters<T>(model), {...}) deduce T.
template <Real T>
Adam(std::vector<ParameterRef<T>>, AdamOptions = {}) -> Adam<T>;
template <Real T>
Adam(std::vector<ParamGroup<T>>, AdamOptions = {}) -> Adam<T>;
template <Module M>
Adam(M&, AdamOptions = {}) -> Adam<detail::module_real_t<M>>;
template <Real T>
AdamW(std::vector<ParameterRef<T>>, AdamWOptions = {}) -> AdamW<T>;
template <Real T>
AdamW(std::vector<ParamGroup<T>>, AdamWOptions = {}) -> AdamW<T>;
template <Module M>
AdamW(M&, AdamWOptions = {}) -> AdamW<detail::module_real_t<M>>;

template <Real T>
Adam<T>::~Adam() = default;
template <Real T>
AdamW<T>::~AdamW() = default;

}  // namespace xgrad::optim

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the update loops and checks.
namespace xgrad {
#define XGRAD_DETAIL_ADAM_COMPILED(EXTERN, T)                                       \
    EXTERN template class optim::detail::AdamFamily<T, optim::AdamOptions, false>;  \
    EXTERN template class optim::detail::AdamFamily<T, optim::AdamWOptions, true>;  \
    EXTERN template class optim::Adam<T>;                                           \
    EXTERN template class optim::AdamW<T>;
XGRAD_COMPILED_IN(optim, XGRAD_DETAIL_ADAM_COMPILED)
#undef XGRAD_DETAIL_ADAM_COMPILED
}  // namespace xgrad
