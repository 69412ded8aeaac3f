// SGD with momentum, torch 1.13's single-tensor update (torch/optim/sgd.py), per parameter:
//   d = maximize ? -grad : grad;   d += weight_decay · p
//   momentum ≠ 0:  buf = first step ? d : momentum·buf + (1 − dampening)·d
//                  d = nesterov ? d + momentum·buf : buf
//   p −= lr · d
#pragma once
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim {

struct SGDOptions {
    double lr = std::numeric_limits<double>::quiet_NaN();  // required, as in torch
    double momentum = 0;
    double dampening = 0;
    double weight_decay = 0;
    bool nesterov = false;
    bool maximize = false;
};

template <Real T>
struct SGDState {
    std::optional<xt::xarray<T>> momentum_buffer;  // none until the first step with momentum
};

template <Real T>
class SGD : public Optimizer<T> {
public:
    using State = std::map<std::string, SGDState<T>>;  // parameter name -> state

    SGD(std::vector<ParameterRef<T>> params, SGDOptions options);
    template <class M>
        requires Module<M>
    SGD(M& model, SGDOptions options) : SGD(named_parameters<T>(model), options) {}
    // Groups with their own lr or weight_decay (optim/optimizer.hpp).
    SGD(std::vector<ParamGroup<T>> groups, SGDOptions options);
    ~SGD() override;

    void step() override;

    double lr() const override { return options_.lr; }
    void set_lr(double lr) override {
        detail::check_lr(lr, "SGD");
        options_.lr = lr;
        this->clear_group_lrs();
    }
    SGDOptions& options() { return options_; }
    const SGDOptions& options() const { return options_; }

    const State& state() const { return state_; }
    void load_state(const State& state);

private:
    SGDOptions options_;
    State state_;

    void validate() const;
};

// ---- out of the class: libxgrad compiles them once for float and double (XGRAD_COMPILED_IN below) ----

template <Real T>
SGD<T>::SGD(std::vector<ParameterRef<T>> params, SGDOptions options)
    : Optimizer<T>(std::move(params), "SGD"), options_(options) {
    validate();
}
template <Real T>
SGD<T>::SGD(std::vector<ParamGroup<T>> groups, SGDOptions options)
    : Optimizer<T>(std::move(groups), "SGD"), options_(options) {
    validate();
}
template <Real T>
SGD<T>::~SGD() = default;

template <Real T>
void SGD<T>::step() {
    validate();
    const SGDOptions& o = options_;
    const T momentum = T(o.momentum), keep = T(1 - o.dampening);
    for (std::size_t k = 0; k < this->params_.size(); ++k) {
        auto& p = this->params_[k];
        const T* g = p.grad ? p.grad() : nullptr;
        if (!g) continue;
        const double weight_decay = this->weight_decay_of(k, o.weight_decay);
        const T neg_lr = T(-this->lr_of(k, o.lr)), wd = T(weight_decay);
        T* w = p.value;
        T* buf = nullptr;
        bool first = false;
        if (o.momentum != 0) {
            auto& s = state_[p.name];
            first = !s.momentum_buffer;
            if (first) s.momentum_buffer = detail::zeros_like(p);
            if (s.momentum_buffer->size() != p.size)
                throw shape_error("SGD: the momentum buffer of \"" + p.name + "\" has shape " +
                                  shape_str(s.momentum_buffer->shape()) + " but the parameter now has shape " +
                                  shape_str(p.shape));
            buf = s.momentum_buffer->data();
        }
        // every array below is the parameter's (size,) flat view
        for (std::size_t i = 0; i < p.size; ++i) {
            T d = o.maximize ? -g[i] : g[i];
            if (weight_decay != 0) d = d + wd * w[i];
            if (buf) {
                buf[i] = first ? d : buf[i] * momentum + keep * d;
                d = o.nesterov ? d + momentum * buf[i] : buf[i];
            }
            w[i] = w[i] + neg_lr * d;
        }
    }
}

template <Real T>
void SGD<T>::load_state(const State& state) {
    for (const auto& [pname, s] : state) {
        const auto& p = detail::state_owner(this->params_, pname, "SGD");
        if (s.momentum_buffer) detail::check_buffer(p, *s.momentum_buffer, "SGD", "momentum_buffer");
    }
    state_ = state;
}

template <Real T>
void SGD<T>::validate() const {
    const SGDOptions& o = options_;
    if (!(o.lr >= 0))
        throw value_error("SGD: lr must be >= 0 (it has no default, as in torch), got " + std::to_string(o.lr));
    if (!(o.momentum >= 0)) throw value_error("SGD: momentum must be >= 0, got " + std::to_string(o.momentum));
    if (!(o.weight_decay >= 0))
        throw value_error("SGD: weight_decay must be >= 0, got " + std::to_string(o.weight_decay));
    if (!std::isfinite(o.dampening))
        throw value_error("SGD: dampening must be finite, got " + std::to_string(o.dampening));
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
        throw value_error("SGD: nesterov needs momentum > 0 and dampening == 0, got momentum " +
                          std::to_string(o.momentum) + " and dampening " + std::to_string(o.dampening));
}

template <Real T>
SGD(std::vector<ParameterRef<T>>, SGDOptions) -> SGD<T>;
template <Real T>
SGD(std::vector<ParamGroup<T>>, SGDOptions) -> SGD<T>;
template <Module M>
SGD(M&, SGDOptions) -> SGD<detail::module_real_t<M>>;

}  // namespace xgrad::optim

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SGD_COMPILED(EXTERN, T) EXTERN template class optim::SGD<T>;
XGRAD_COMPILED_IN(optim, XGRAD_DETAIL_SGD_COMPILED)
#undef XGRAD_DETAIL_SGD_COMPILED
}  // namespace xgrad
