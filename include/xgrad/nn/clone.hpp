// nn::clone(m): a deep copy; nn::clones(layer, n): n of them (PyTorch's _get_clones).
//
// A plain C++ copy of a module (`Layer b = a;`, `std::vector<Layer>(3, layer)`) is the SAME layer,
// as `b = a` is in Python: Var and std::shared_ptr<Generator> members are handles, so the copy shares
// every tensor and generator. The walk sees that sharing as tied parameters (nn/module.hpp): each
// tensor is counted and updated once, tied_parameters(m) lists the names, and io::load_state_dict
// refuses a file that gives two tied names different values. For a new layer, clone it.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "xgrad/nn/module.hpp"

namespace xgrad::nn {

// A deep copy of m: new tensors with the same values and no gradient (requires_grad and names as
// in m), new generators in the same state (the copy draws the same dropout masks as m would). What
// is tied inside m is tied the same way inside the copy.
template <class M>
    requires Module<M>
M clone(const M& m) {
    M copy = m;
    xgrad::detail::replace_parameters(copy, [](const auto& var) {
        auto value = var.value();  // an owning copy
        auto fresh = var.requires_grad() ? parameter(std::move(value)) : constant(std::move(value));
        fresh.node()->label = var.node()->label;
        return fresh;
    });
    std::vector<std::pair<const Generator*, std::shared_ptr<Generator>>> copied;  // shared ones stay shared
    xgrad::detail::Ignore ignore;
    auto on_generator = [&](const std::string&, std::shared_ptr<Generator>& gen) {
        const auto it = std::find_if(copied.begin(), copied.end(), [&](const auto& e) { return e.first == gen.get(); });
        if (it != copied.end()) return void(gen = it->second);
        copied.emplace_back(gen.get(), std::make_shared<Generator>(*gen));
        gen = copied.back().second;
    };
    xgrad::detail::walk(copy, "", ignore, ignore, on_generator);
    return copy;
}

// n independent copies of layer (PyTorch's _get_clones, for the layers of a Transformer stack):
// each a clone, with each of its generators reseeded from (that generator's seed, the copy's index),
// so no two layers draw the same dropout masks and the stack is reproducible from the layer's seeds.
template <class M>
    requires Module<M>
std::vector<M> clones(const M& layer, std::size_t n) {
    std::vector<M> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        out.push_back(clone(layer));
        for (const auto& [name, gen] : named_generators(out.back()))
            gen->manual_seed(gen->seed_of_stream(i));
    }
    return out;
}

}  // namespace xgrad::nn
