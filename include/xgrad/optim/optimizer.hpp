// The optimizer base: a flat list of named parameters (ParameterRef, see nn/module.hpp) that the
// concrete optimizers update in place with plain loops over value and gradient pointers.
// Parameters whose gradient is absent (grad() == nullptr) are skipped, as torch skips grad None.
// Per-parameter state is keyed by the parameter's dotted name, so it can be checkpointed.
// Parameter groups (torch's param_groups) give some parameters their own lr or weight_decay:
//
//   optim::AdamW opt(optim::weight_decay_groups(model, 0.1), {.lr = 6e-4, .betas = {0.9, 0.95}});
//
// decays the parameters of >= 2 dimensions (matmul weights, embeddings) and not biases and norms,
// as nanoGPT's configure_optimizers; any list of ParamGroups works the same for every optimizer.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <xtensor/xarray.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/error.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::optim {

// Some parameters and the options they take instead of the optimizer's (unset: the optimizer's).
template <Real T>
struct ParamGroup {
    std::vector<ParameterRef<T>> params;
    std::optional<double> lr{};
    std::optional<double> weight_decay{};
};

template <Real T>
class Optimizer {
public:
    // Checks the names and the tensors are unique (named_parameters(model) gives a tied tensor once);
    // `name` is the optimizer's, for errors.
    explicit Optimizer(std::vector<ParameterRef<T>> params, const char* name);
    // The same over the parameters of every group; a group may be empty.
    Optimizer(std::vector<ParamGroup<T>> groups, const char* name);
    virtual ~Optimizer();  // out of line: compiled in libxgrad with the rest

    // One update of every parameter that has a gradient.
    virtual void step() = 0;
    // The optimizer's lr; set_lr sets it for every group, as a schedule does in torch
    // (`for g in opt.param_groups: g["lr"] = lr`).
    virtual double lr() const = 0;
    virtual void set_lr(double lr) = 0;

    // Forgets every parameter's gradient (grad() becomes nullptr, as torch's set_to_none).
    void zero_grad() {
        for (auto& p : params_) p.zero_grad();
    }
    const std::vector<ParameterRef<T>>& parameters() const { return params_; }
    // The group overrides of parameter i (an index into parameters()).
    const ParamGroup<T>& group_of(std::size_t i) const { return groups_[group_index_[i]]; }

protected:
    std::vector<ParameterRef<T>> params_;
    std::vector<ParamGroup<T>> groups_;  // their params lists are moved into params_
    std::vector<std::size_t> group_index_;  // per parameter

    double lr_of(std::size_t i, double lr) const { return group_of(i).lr.value_or(lr); }
    double weight_decay_of(std::size_t i, double weight_decay) const {
        return group_of(i).weight_decay.value_or(weight_decay);
    }
    void clear_group_lrs() {
        for (auto& g : groups_) g.lr.reset();
    }

private:
    void check_unique(const char* name) const;
};

template <Real T>
Optimizer<T>::~Optimizer() = default;
template <Real T>
Optimizer<T>::Optimizer(std::vector<ParamGroup<T>> groups, const char* name) {
    for (auto& g : groups) {
        for (auto& p : g.params) params_.push_back(std::move(p)), group_index_.push_back(groups_.size());
        g.params.clear();
        for (auto [value, what] : {std::pair{g.lr, "lr"}, std::pair{g.weight_decay, "weight_decay"}})
            if (value && !(*value >= 0))
                throw value_error(std::string(name) + ": group " + std::to_string(groups_.size()) + "'s " + what +
                                  " must be >= 0, got " + std::to_string(*value));
        groups_.push_back(std::move(g));
    }
    check_unique(name);
}

template <Real T>
Optimizer<T>::Optimizer(std::vector<ParameterRef<T>> params, const char* name) : params_(std::move(params)) {
    groups_.resize(1);
    group_index_.assign(params_.size(), 0);
    check_unique(name);
}

template <Real T>
void Optimizer<T>::check_unique(const char* name) const {
    if (params_.empty())  // as torch: a model whose walk finds nothing would train nothing, silently
        throw value_error(std::string(name) + ": no parameters to optimize (an empty list, or a model without any)");
    std::set<std::string> names;
    std::set<const Node*> nodes;
    for (const auto& p : params_) {
        if (!names.insert(p.name).second)
            throw value_error(std::string(name) + ": parameter name \"" + p.name + "\" appears twice");
        if (p.node && !nodes.insert(p.node).second)
            throw value_error(std::string(name) + ": parameter \"" + p.name +
                              "\" is the same tensor as an earlier parameter");
    }
}

namespace detail {

// A zero-filled buffer shaped like parameter p.
template <Real T>
xt::xarray<T> zeros_like(const ParameterRef<T>& p) {
    xt::xarray<T> a = xt::xarray<T>::from_shape(p.shape);
    a.fill(T(0));
    return a;
}

template <Real T>
const ParameterRef<T>* find_parameter(const std::vector<ParameterRef<T>>& params, const std::string& name) {
    for (const auto& p : params)
        if (p.name == name) return &p;
    return nullptr;
}

// load_state: `buffer` (named `what` for parameter p) must have p's shape.
template <Real T>
void check_buffer(const ParameterRef<T>& p, const xt::xarray<T>& buffer, const char* op, const char* what) {
    if (!std::equal(buffer.shape().begin(), buffer.shape().end(), p.shape.begin(), p.shape.end()))
        throw shape_error(std::string(op) + ": load_state: " + what + " of \"" + p.name + "\" has shape " +
                          shape_str(buffer.shape()) + " but the parameter has shape " + shape_str(p.shape));
}

// load_state: every state entry must name a parameter of this optimizer; returns it.
template <Real T>
const ParameterRef<T>& state_owner(const std::vector<ParameterRef<T>>& params, const std::string& name,
                                   const char* op) {
    const auto* p = find_parameter(params, name);
    if (!p) throw value_error(std::string(op) + ": load_state: no parameter named \"" + name + "\"");
    return *p;
}

// The element type of a module's parameters (the first Var found, depth first); void if none.
// Lets Adam(model, {...}) deduce Adam<T>.
template <class... Ts>
struct first_non_void {
    using type = void;
};
template <class T, class... Ts>
struct first_non_void<T, Ts...> {
    using type = std::conditional_t<std::is_void_v<T>, typename first_non_void<Ts...>::type, T>;
};
template <class X>
struct real_of {
    using type = void;
};
template <Real T, std::size_t N>
struct real_of<Var<T, N>> {
    using type = T;
};
template <class X, class A>
struct real_of<std::vector<X, A>> : real_of<X> {};
template <class X, std::size_t N>
struct real_of<std::array<X, N>> : real_of<X> {};
template <class X>
struct real_of<std::optional<X>> : real_of<X> {};
template <class Tuple>
struct first_real_member;
template <class... Xs>
struct first_real_member<boost::hana::tuple<Xs...>> : first_non_void<typename real_of<std::remove_cvref_t<Xs>>::type...> {};
template <Module M>
struct real_of<M> : first_real_member<decltype(boost::hana::members(std::declval<M>()))> {};
template <class M>
using module_real_t = typename real_of<std::remove_cvref_t<M>>::type;

inline void check_lr(double lr, const char* op) {
    if (!(lr >= 0)) throw value_error(std::string(op) + ": lr must be >= 0, got " + std::to_string(lr));
}

}  // namespace detail

// nanoGPT's configure_optimizers: the parameters of >= 2 dimensions (matmul weights, embeddings)
// decay by weight_decay, the others (biases, norms) not at all. Two groups, in that order.
template <Real T>
std::vector<ParamGroup<T>> weight_decay_groups(std::vector<ParameterRef<T>> params, double weight_decay) {
    std::vector<ParamGroup<T>> groups(2);
    groups[0].weight_decay = weight_decay, groups[1].weight_decay = 0.0;
    for (auto& p : params) groups[p.shape.size() >= 2 ? 0 : 1].params.push_back(std::move(p));
    return groups;
}
template <class M>
    requires Module<M>
auto weight_decay_groups(M& model, double weight_decay) {
    return weight_decay_groups(named_parameters<detail::module_real_t<M>>(model), weight_decay);
}

}  // namespace xgrad::optim

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_OPTIMIZER_COMPILED(EXTERN, T) EXTERN template class optim::Optimizer<T>;
XGRAD_COMPILED_IN(optim, XGRAD_DETAIL_OPTIMIZER_COMPILED)
#undef XGRAD_DETAIL_OPTIMIZER_COMPILED
}  // namespace xgrad
