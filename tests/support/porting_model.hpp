// The xgrad side of docs/porting.md: the PyTorch model of tests/fixtures/make_porting.py (a DETR-style
// encoder layer: positions added to queries and keys, dropout, post-norm; two of them and a head),
// written as xgrad modules. tests/io/porting.cpp checks it against PyTorch; tests/nn/deep_models.cpp
// uses the layer for the module-system tests.
#pragma once
#include <cstddef>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace xgrad::testing {

// --- docs/porting.md, step 2: the module structs (members named as the PyTorch attributes) ---
template <Real T>
struct Layer {
    BOOST_HANA_DEFINE_STRUCT(Layer, (nn::MultiheadAttention<T>, self_attn), (nn::Linear<T>, linear1),
                             (nn::LayerNorm<T>, norm1), (nn::Dropout, dropout1));
    bool training = true;

    Layer() = default;
    Layer(std::size_t d_model, std::size_t nhead, double dropout, Generator& gen)
        : self_attn({.embed_dim = d_model, .num_heads = nhead, .dropout = dropout}, gen),  // (S, N, E) as torch
          linear1(d_model, d_model, gen), norm1(d_model), dropout1(dropout, gen) {}

    // def forward(self, src, pos): q = k = src + pos; ...
    Var<T, 3> operator()(const Var<T, 3>& src, const Var<T, 3>& pos) const {
        const auto src2 = self_attn.forward(src + pos, src + pos, src, {.need_weights = false}).output;
        return norm1(linear1(src + dropout1(src2)));
    }
};

template <Real T>
struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (std::vector<Layer<T>>, layers), (nn::Linear<T>, head));
    bool training = true;

    Model(std::size_t d_model, std::size_t nhead, std::size_t num_layers, std::size_t classes, double dropout,
          Generator& gen)
        : layers(nn::clones(Layer<T>(d_model, nhead, dropout, gen), num_layers)), head(d_model, classes, gen) {}

    Var<T, 3> operator()(Var<T, 3> src, const Var<T, 3>& pos) const {
        for (const auto& layer : layers) src = layer(src, pos);
        return head(src);
    }
};

}  // namespace xgrad::testing
