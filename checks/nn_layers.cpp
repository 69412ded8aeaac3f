// Gradient checks for the embedding op and the nn layers (Linear, Embedding, LayerNorm, RMSNorm,
// SwiGLU, Dropout, PositionalEncoding), alone and composed; a module's parameters enter as one flat input
// (xgrad/check/module_check.hpp).
#include <cstdint>

#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

using Idx2 = xt::xtensor<std::int64_t, 2>;
using Idx3 = xt::xtensor<std::int64_t, 3>;

// A LayerNorm module whose parameters are the gradcheck inputs.
template <std::size_t N>
auto layer_norm_module(const Var<double, N>& x, const Var<double, 1>& w, const Var<double, 1>& b) {
    nn::LayerNorm<double> ln;
    ln.weight = w, ln.bias = b;
    return ln(x);
}

const RegisterGradchecks registered_nn_layers{"nn_layers", {
    {"embedding", "(4,3) by indices (2,3) with repeats",
     [] {
         const Idx2 idx{{0, 3, 3}, {2, 0, 3}};
         return gradcheck([&](auto& w) { return embedding(w, idx); }, randn<2>({4, 3}, 41));
     }},
    {"embedding", "(5,2) by indices (2,2,2)",
     [] {
         const Idx3 idx{{{4, 1}, {4, 4}}, {{0, 3}, {1, 1}}};
         return gradcheck([&](auto& w) { return embedding(w, idx); }, randn<2>({5, 2}, 42));
     }},
    {"Linear", "module (2,3,4) -> 3, w.r.t. x and parameters",
     [] {
         Generator gen(3);
         const nn::Linear<double> lin(4, 3, gen);
         return gradcheck([&](auto& flat, auto& x) { return with_flat_parameters(lin, flat)(x); },
                          flatten_parameters(lin), randn<3>({2, 3, 4}, 40));
     }},
    {"Linear", "module (5,4) -> 2 no bias",
     [] {
         Generator gen(4);
         const nn::Linear<double> lin(4, 2, gen, false);
         return gradcheck([&](auto& flat, auto& x) { return with_flat_parameters(lin, flat)(x); },
                          flatten_parameters(lin), randn<2>({5, 4}, 41));
     }},
    {"Embedding", "module (5,3) by indices (2,3)",
     [] {
         Generator gen(5);
         const nn::Embedding<double> emb(5, 3, gen);
         const Idx2 idx{{4, 0, 4}, {1, 2, 1}};
         return gradcheck([&](auto& flat) { return with_flat_parameters(emb, flat)(idx); }, flatten_parameters(emb));
     }},
    {"LayerNorm", "(2,3,4) affine",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return layer_norm_module(x, w, b); }, randn<3>({2, 3, 4}, 43),
                          randn<1>({4}, 44), randn<1>({4}, 45));
     }},
    {"LayerNorm", "(3,5) no affine",
     [] {
         nn::LayerNorm<double> ln(5, 1e-5, false);
         return gradcheck([&](auto& x) { return ln(x); }, randn<2>({3, 5}, 46));
     }},
    {"RMSNorm", "module (2,3,4) eps 1e-6, w.r.t. x and weight",
     [] {
         nn::RMSNorm<double> norm(4, 1e-6);
         return gradcheck([&](auto& flat, auto& x) { return with_flat_parameters(norm, flat)(x); },
                          xt::xtensor<double, 1>(randn<1>({4}, 50) + 1.0), randn<3>({2, 3, 4}, 51));
     }},
    {"RMSNorm", "(3,5) no weight, default eps",
     [] {
         nn::RMSNorm<double> norm(5, std::nullopt, false);
         return gradcheck([&](auto& x) { return norm(x); }, randn<2>({3, 5}, 52));
     }},
    {"SwiGLU", "module 4 -> 6 -> 4 on (2,3,4), w.r.t. x and w1, w2, w3",
     [] {
         Generator gen(53);
         nn::SwiGLU<double> ffn(4, 6, gen);
         return gradcheck([&](auto& flat, auto& x) { return with_flat_parameters(ffn, flat)(x); },
                          flatten_parameters(ffn), randn<3>({2, 3, 4}, 54));
     }},
    {"PositionalEncoding", "(2,3,4) batch first -> linear(4,3)",
     [] {
         nn::PositionalEncoding<double> pe({.d_model = 4, .dropout = 0.0, .batch_first = true, .max_len = 8}, 1);
         return gradcheck([&](auto& x, auto& w, auto& b) { return linear(pe(x), w, b); }, randn<3>({2, 3, 4}, 47),
                          randn<2>({3, 4}, 48), randn<1>({3}, 49));
     }},
    {"PositionalEncoding", "(3,2,4) sequence first -> linear(4,3)",
     [] {
         nn::PositionalEncoding<double> pe({.d_model = 4, .dropout = 0.0, .max_len = 8}, 1);
         return gradcheck([&](auto& x, auto& w, auto& b) { return linear(pe(x), w, b); }, randn<3>({3, 2, 4}, 55),
                          randn<2>({3, 4}, 56), randn<1>({3}, 57));
     }},
    {"Embedding+PositionalEncoding+LayerNorm", "(6,4) by (2,3)",
     [] {
         const Idx2 idx{{5, 1, 5}, {0, 2, 1}};
         nn::PositionalEncoding<double> pe({.d_model = 4, .dropout = 0.0, .batch_first = true, .max_len = 8}, 1);
         return gradcheck([&](auto& table, auto& w, auto& b) { return layer_norm_module(pe(embedding(table, idx)), w, b); },
                          randn<2>({6, 4}, 50), randn<1>({4}, 51), randn<1>({4}, 52));
     }},
    {"Dropout", "(3,4) p=0.4 -> linear(4,2)",
     [] {
         nn::Dropout drop(0.4, 7);
         return gradcheck(
             [&](auto& x, auto& w) {
                 drop.generator->manual_seed(7);  // the same mask on every call
                 return linear(drop(x), w);
             },
             randn<2>({3, 4}, 53), randn<2>({2, 4}, 54));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
