// The catalogue of bad inputs, continued (ops: bad_input.cpp): nn layers and initializers,
// scaled_dot_product_attention, MultiheadAttention, optimizers, clip_grad_norm and schedules.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_core_bad_input_nn {

using namespace xgrad;

namespace {
using D1 = xt::xtensor<double, 1>;
using D2 = xt::xtensor<double, 2>;
using I1 = xt::xtensor<std::int64_t, 1>;
using B2 = xt::xtensor<bool, 2>;
using Mha = nn::MultiheadAttention<double>;
constexpr double NaN = std::numeric_limits<double>::quiet_NaN();
constexpr double inf = std::numeric_limits<double>::infinity();

template <std::size_t N>
Var<double, N> ones(const std::array<std::size_t, N>& shape) {
    return constant(xt::xtensor<double, N>(shape, 1.0));
}

struct Toy {
    BOOST_HANA_DEFINE_STRUCT(Toy, (Var<double, 2>, w), (Var<double, 1>, b));
};
Toy make_toy() { return {parameter(D2({2, 3}, 0.5)), parameter(D1({3}, 0.5))}; }
}  // namespace

TEST_CASE("bad input: nn layer constructors, layers and initializers") {
    Generator gen;
    CHECK_THROWS_WITH_AS(nn::Linear<double>(0, 3, gen),
                         "Linear: in_features and out_features must be positive, got 0 and 3", value_error);
    CHECK_THROWS_WITH_AS(nn::Linear<double>()(ones<2>({2, 3})),  // before: a segfault
                         "Linear: weight is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(nn::Linear<double>(4, 5, gen)(ones<2>({2, 3})),
                         "linear: weight has shape (5, 4) but x has shape (2, 3): expected weight (out, 3)",
                         shape_error);
    CHECK_THROWS_WITH_AS(nn::Embedding<double>(0, 3, gen),
                         "Embedding: num_embeddings and embedding_dim must be positive, got 0 and 3", value_error);
    CHECK_THROWS_WITH_AS(nn::Embedding<double>(3, 3, gen, 3),
                         "Embedding: padding_idx 3 is out of range for 3 embeddings",
                         value_error);
    CHECK_THROWS_WITH_AS(nn::Embedding<double>(5, 3, gen)(I1{0, 5}),
                         "embedding: index 5 at position (1,) of indices (2,) is out of range [0, 5) for weight (5, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(nn::Embedding<double>()(I1{0}),
                         "embedding: weight is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>(0), "LayerNorm: normalized_dim must be positive", value_error);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>(3, -1), "LayerNorm: eps must be >= 0, got -1.000000", value_error);
    CHECK_THROWS_WITH_AS(nn::LayerNorm<double>(3)(ones<2>({2, 4})),
                         "layer_norm: weight must have shape (4,) to match the last axis of x (2, 4), got (3,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(nn::Dropout(1.5, 1), "Dropout: probability p must be in [0, 1], got 1.500000", value_error);
    CHECK_THROWS_WITH_AS(nn::Dropout(NaN, gen), "Dropout: probability p must be in [0, 1], got nan", value_error);

    using PE = nn::PositionalEncoding<double>;
    CHECK_THROWS_WITH_AS(PE({.d_model = 0}, 1), "PositionalEncoding: d_model and max_len must be positive, got 0 and 1000",
                         value_error);
    CHECK_THROWS_WITH_AS(PE({.d_model = 4, .max_len = 0}, gen),
                         "PositionalEncoding: d_model and max_len must be positive, got 4 and 0", value_error);
    CHECK_THROWS_WITH_AS(PE({.d_model = 4, .dropout = -0.5}, 1), "Dropout: probability p must be in [0, 1], got -0.500000",
                         value_error);
    const PE pe({.d_model = 4, .dropout = 0.0, .batch_first = true, .max_len = 10}, 1);
    CHECK_THROWS_WITH_AS(pe(ones<3>({1, 11, 4})),
                         "PositionalEncoding: x (1, 11, 4) must be (N, T, d) (batch_first) with d = 4 and T <= max_len 10",
                         shape_error);
    CHECK_THROWS_WITH_AS(pe(ones<3>({1, 2, 5})),
                         "PositionalEncoding: x (1, 2, 5) must be (N, T, d) (batch_first) with d = 4 and T <= max_len 10",
                         shape_error);
    // before: "must be (..., T, 0) with T <= max_len 0"
    CHECK_THROWS_WITH_AS(PE()(ones<2>({2, 4})),
                         "PositionalEncoding: the module has no table (construct it with options)",
                         value_error);

    // initializers: before, bad bounds filled the parameter silently and an empty Var segfaulted
    auto p = parameter(D2({2, 3}, 0.0));
    Var<double, 2> empty;
    CHECK_THROWS_WITH_AS(init::uniform_(p, 1, 0, gen),
                         "uniform_: needs finite bounds lo <= hi, got lo 1.000000 and hi 0.000000 for a parameter of "
                         "shape (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::uniform_(p, -inf, 0, gen),
                         "uniform_: needs finite bounds lo <= hi, got lo -inf and hi 0.000000 for a parameter of shape "
                         "(2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::normal_(p, 0, -1, gen),
                         "normal_: needs a finite mean and a finite std >= 0, got mean 0.000000 and std -1.000000 for "
                         "a parameter of shape (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::normal_(p, NaN, 1, gen),
                         "normal_: needs a finite mean and a finite std >= 0, got mean nan and std 1.000000 for a "
                         "parameter of shape (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::xavier_uniform_(empty, gen),
                         "xavier_uniform_: the parameter is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::kaiming_uniform_(empty, 1.0, gen),
                         "kaiming_uniform_: the parameter is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(init::constant_(empty, 1.0),
                         "constant_: the parameter is an empty Var (default-constructed or moved from)", value_error);
    auto zero_elements = parameter(D2({0, 3}, 0.0));  // a no-op, as torch
    CHECK_NOTHROW(init::xavier_uniform_(zero_elements, gen));
    CHECK_NOTHROW(init::kaiming_uniform_(zero_elements, 1.0, gen));
}

TEST_CASE("bad input: scaled_dot_product_attention") {
    const auto q = ones<3>({2, 4, 8}), k = ones<3>({2, 6, 8}), v = ones<3>({2, 6, 5});
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, ones<3>({2, 6, 7}), v),
                         "scaled_dot_product_attention: q and k need the same last dim E: q (2, 4, 8) and k (2, 6, 7)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, ones<3>({2, 5, 5})),
                         "scaled_dot_product_attention: k and v need the same sequence length S: k (2, 6, 8) and v "
                         "(2, 5, 5)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, ones<3>({3, 6, 8}), v),
                         "scaled_dot_product_attention: q, k and v need the same leading dims: q (2, 4, 8), k (3, 6, "
                         "8) and v (2, 6, 5)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, no_mask, 1.5),
                         "scaled_dot_product_attention: dropout_p must be in [0, 1], got 1.500000", value_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, no_mask, 0.5),
                         "scaled_dot_product_attention: dropout_p > 0 needs a Generator", value_error);
    // before: NaN or inf scores, returned silently
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, no_mask, 0, false, NaN),
                         "scaled_dot_product_attention: scale must be finite, got nan", value_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, no_mask, 0, true, inf),
                         "scaled_dot_product_attention: scale must be finite, got inf", value_error);
    // mask errors name this op (before: masked_softmax)
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, keep_mask(B2({3, 5}, true))),
                         "scaled_dot_product_attention: keep_mask of shape (3, 5) does not broadcast to the scores of "
                         "shape (2, 4, 6)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, ignore_mask(B2({4, 5}, false)), 0, true),
                         "scaled_dot_product_attention: ignore_mask of shape (4, 5) does not broadcast to the scores "
                         "of shape (2, 4, 6)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention_with_weights(q, k, v, additive_mask(D1({5}, 0.0))),
                         "scaled_dot_product_attention: additive_mask of shape (5,) does not broadcast to the scores "
                         "of shape (2, 4, 6)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, valid_lens(I1{1, 2, 3})),
                         "scaled_dot_product_attention: valid_lens of shape (3,) must equal the leading axes of the "
                         "scores of shape (2, 4, 6)",
                         shape_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, valid_lens(I1{1, -2})),
                         "scaled_dot_product_attention: valid_lens holds a negative length -2", value_error);
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(Var<double, 3>{}, k, v),
                         "scaled_dot_product_attention: q is an empty Var (default-constructed or moved from)",
                         value_error);
}

TEST_CASE("bad input: MultiheadAttention construction") {
    Generator g;
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 0}, g),
                         "MultiheadAttention: embed_dim, num_heads, kdim and vdim must be positive, got 0, 1, 0 and 0",
                         value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 4, .num_heads = 0}, g),
                         "MultiheadAttention: embed_dim, num_heads, kdim and vdim must be positive, got 4, 0, 4 and 4",
                         value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 4, .num_heads = 2, .kdim = 0}, g),
                         "MultiheadAttention: embed_dim, num_heads, kdim and vdim must be positive, got 4, 2, 0 and 4",
                         value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 4, .num_heads = 2, .vdim = 0}, g),
                         "MultiheadAttention: embed_dim, num_heads, kdim and vdim must be positive, got 4, 2, 4 and 0",
                         value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 6, .num_heads = 4}, g),
                         "MultiheadAttention: embed_dim 6 is not divisible by num_heads 4", value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 4, .num_heads = 2, .dropout = 1.5}, g),
                         "MultiheadAttention: dropout must be in [0, 1], got 1.500000", value_error);
    CHECK_THROWS_WITH_AS(Mha({.embed_dim = 4, .num_heads = 2, .dropout = NaN}, g),
                         "MultiheadAttention: dropout must be in [0, 1], got nan", value_error);
}

// the inputs of the forward test case below, as every MHA mask error names them
#define QK " for query (3, 2, 4) and key (5, 2, 3)"
#define UQK " for query (3, 4) and key (5, 3)"

TEST_CASE("bad input: MultiheadAttention forward") {
    Generator g;
    Mha m({.embed_dim = 4, .num_heads = 2, .kdim = 3, .vdim = 5}, g);  // sequence first: (L, N, E)
    const auto q = ones<3>({3, 2, 4}), k = ones<3>({5, 2, 3}), v = ones<3>({5, 2, 5});
    const auto uq = ones<2>({3, 4}), uk = ones<2>({5, 3}), uv = ones<2>({5, 5});  // unbatched
    CHECK_THROWS_WITH_AS(Mha().forward(q, q, q),
                         "MultiheadAttention: the module has no parameters (construct it with options and a Generator)",
                         value_error);
    CHECK_THROWS_WITH_AS(m.forward(Var<double, 3>{}, k, v),
                         "MultiheadAttention: query is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(m.forward(ones<3>({3, 2, 5}), k, v),
                         "MultiheadAttention: query has shape (3, 2, 5) but its last dim must be embed_dim = 4",
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, ones<3>({5, 2, 4}), v),
                         "MultiheadAttention: key has shape (5, 2, 4) but its last dim must be kdim = 3", shape_error);
    CHECK_THROWS_WITH_AS(m.forward(uq, uk, ones<2>({5, 4})),
                         "MultiheadAttention: value has shape (5, 4) but its last dim must be vdim = 5", shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, ones<3>({4, 2, 5})),
                         "MultiheadAttention: key (5, 2, 3) and value (4, 2, 5) need the same sequence length and "
                         "batch size",
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, ones<3>({5, 3, 3}), ones<3>({5, 3, 5})),
                         "MultiheadAttention: query (3, 2, 4) and key (5, 3, 3) need the same batch size (axis 1)",
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(uq, uk, ones<2>({4, 5})),
                         "MultiheadAttention: key (5, 3) and value (4, 5) need the same sequence length and batch size",
                         shape_error);
    Mha bf({.embed_dim = 4, .num_heads = 2, .batch_first = true}, g);  // (N, L, E)
    CHECK_THROWS_WITH_AS(bf.forward(ones<3>({2, 3, 4}), ones<3>({3, 3, 4}), ones<3>({3, 3, 4})),
                         "MultiheadAttention: query (2, 3, 4) and key (3, 3, 4) need the same batch size "
                         "(batch_first: axis 0)",
                         shape_error);
    Mha changed = bf;
    changed.options.num_heads = 3;  // options edited after construction
    CHECK_THROWS_WITH_AS(changed.forward(q, q, q),
                         "MultiheadAttention: embed_dim 4 is not a positive multiple of num_heads 3", value_error);

    auto with = [&](auto edit) {
        nn::MhaForwardOptions<double> o;
        edit(o);
        return o;
    };
    CHECK_THROWS_WITH_AS(
        m.forward(q, k, v, with([](auto& o) { o.key_padding_mask = ignore_mask(B2({2, 4}, false)); })),
                         "MultiheadAttention: key_padding_mask (ignore_mask) has shape (2, 4) but expected (2, 5) (N, S)" QK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, v, with([](auto& o) { o.key_padding_mask = additive_mask(D1({5}, 0.0)); })),
                         "MultiheadAttention: key_padding_mask (additive_mask) has shape (5,) but expected (2, 5) (N, S)" QK,
                         shape_error);
    CHECK_THROWS_WITH_AS(
        m.forward(uq, uk, uv, with([](auto& o) { o.key_padding_mask = ignore_mask(B2({1, 5}, false)); })),
        "MultiheadAttention: key_padding_mask (ignore_mask) has shape (1, 5) but expected (5,) (S)" UQK, shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, v, with([](auto& o) { o.attn_mask = ignore_mask(B2({3, 4}, false)); })),
                         "MultiheadAttention: attn_mask (ignore_mask) has shape (3, 4) but expected (3, 5) (L, S) or "
                         "(4, 3, 5) (N*num_heads, L, S)" QK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, v, with([](auto& o) {
                             o.attn_mask = additive_mask(xt::xtensor<double, 3>({2, 3, 5}, 0.0));
                         })),
                         "MultiheadAttention: attn_mask (additive_mask) has shape (2, 3, 5) but expected (3, 5) (L, S) or "
                         "(4, 3, 5) (N*num_heads, L, S)" QK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(uq, uk, uv, with([](auto& o) {
                             o.attn_mask = ignore_mask(xt::xtensor<bool, 3>({1, 3, 5}, false));
                         })),
                         "MultiheadAttention: attn_mask (ignore_mask) has shape (1, 3, 5) but expected (3, 5) (L, S) or "
                         "(2, 3, 5) (num_heads, L, S)" UQK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, v, with([](auto& o) { o.valid_lens = valid_lens(I1{1, 2, 3}); })),
                         "MultiheadAttention: valid_lens has shape (3,) but expected (2,) (N) or (2, 3) (N, L)" QK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(uq, uk, uv, with([](auto& o) { o.valid_lens = valid_lens(I1{1, 2}); })),
                         "MultiheadAttention: valid_lens has shape (2,) but expected () or (3,) (L)" UQK,
                         shape_error);
    CHECK_THROWS_WITH_AS(m.forward(q, k, v, with([](auto& o) { o.valid_lens = valid_lens(I1{1, -1}); })),
                         "MultiheadAttention: valid_lens must be >= 0, got -1", value_error);

    Mha drop({.embed_dim = 4, .num_heads = 2, .dropout = 0.1}, g);
    drop.dropout_generator.reset();
    CHECK_THROWS_WITH_AS(drop.forward(q, q, q),
                         "MultiheadAttention: dropout 0.100000 while training, but the module has no dropout_generator",
                         value_error);
    set_training(drop, false);
    CHECK_NOTHROW(drop.forward(q, q, q));
}
#undef QK
#undef UQK

TEST_CASE("bad input: optimizers") {
    Toy toy = make_toy();
    using optim::SGD, optim::Adam, optim::AdamW;
    CHECK_THROWS_WITH_AS(SGD(toy, {}), "SGD: lr must be >= 0 (it has no default, as in torch), got nan", value_error);
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = -1}), "SGD: lr must be >= 0 (it has no default, as in torch), got -1.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = 0.1, .momentum = -0.5}), "SGD: momentum must be >= 0, got -0.500000",
                         value_error);
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = 0.1, .weight_decay = -1}), "SGD: weight_decay must be >= 0, got -1.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = 0.1, .nesterov = true}),
                         "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum 0.000000 and dampening "
                         "0.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                         "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum 0.900000 and dampening "
                         "0.100000",
                         value_error);
    // before: accepted, and the first step with momentum made every parameter NaN
    CHECK_THROWS_WITH_AS(SGD(toy, {.lr = 0.1, .momentum = 0.9, .dampening = NaN}),
                         "SGD: dampening must be finite, got nan", value_error);
    SGD sgd(toy, {.lr = 0.1});
    CHECK_THROWS_WITH_AS(sgd.set_lr(-0.5), "SGD: lr must be >= 0, got -0.500000", value_error);
    sgd.options().momentum = -1;  // options edited after construction are checked at step()
    CHECK_THROWS_WITH_AS(sgd.step(), "SGD: momentum must be >= 0, got -1.000000", value_error);

    CHECK_THROWS_WITH_AS(Adam(toy, {.lr = -1}), "Adam: lr must be >= 0, got -1.000000", value_error);
    CHECK_THROWS_WITH_AS(Adam(toy, {.lr = NaN}), "Adam: lr must be >= 0, got nan", value_error);
    CHECK_THROWS_WITH_AS(Adam(toy, {.betas = {1.0, 0.9}}), "Adam: betas.first must be in [0, 1), got 1.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(AdamW(toy, {.betas = {0.9, NaN}}), "AdamW: betas.second must be in [0, 1), got nan",
                         value_error);
    CHECK_THROWS_WITH_AS(AdamW(toy, {.eps = -1}), "AdamW: eps must be >= 0, got -1.000000", value_error);
    CHECK_THROWS_WITH_AS(Adam(toy, {.weight_decay = -0.1}), "Adam: weight_decay must be >= 0, got -0.100000",
                         value_error);

    auto params = named_parameters<double>(toy);
    auto twice = params;
    twice.push_back(params[0]);
    CHECK_THROWS_WITH_AS(SGD(twice, {.lr = 0.1}), "SGD: parameter name \"w\" appears twice", value_error);
    twice.back().name = "w2";
    CHECK_THROWS_WITH_AS(Adam<double>{twice}, "Adam: parameter \"w2\" is the same tensor as an earlier parameter",
                         value_error);

    Adam adam(toy);
    Adam<double>::State state;
    state["nope"].exp_avg = xt::zeros<double>({3});
    CHECK_THROWS_WITH_AS(adam.load_state(state), "Adam: load_state: no parameter named \"nope\"", value_error);
    state.clear();
    state["b"].step = -1;
    state["b"].exp_avg = state["b"].exp_avg_sq = xt::zeros<double>({3});
    CHECK_THROWS_WITH_AS(adam.load_state(state), "Adam: load_state: step of \"b\" is negative", value_error);
    state["b"].exp_avg_sq = xt::zeros<double>({4});
    CHECK_THROWS_WITH_AS(adam.load_state(state),
                         "Adam: load_state: exp_avg_sq of \"b\" has shape (4,) but the parameter has shape (3,)",
                         shape_error);
    SGD<double>::State sgd_state;
    sgd_state["w"].momentum_buffer = xt::zeros<double>({3});
    CHECK_THROWS_WITH_AS(sgd.load_state(sgd_state),
                         "SGD: load_state: momentum_buffer of \"w\" has shape (3,) but the parameter has shape (2, 3)",
                         shape_error);
}

TEST_CASE("bad input: clip_grad_norm and WarmupCosine") {
    Toy toy = make_toy();
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(toy, -1.0), "clip_grad_norm: max_norm must be >= 0, got -1.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(toy, NaN), "clip_grad_norm: max_norm must be >= 0, got nan",
                         value_error);
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(toy, 1.0, 0.0),
                         "clip_grad_norm: norm_type must be > 0 or infinity, got 0.000000", value_error);
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(toy, 1.0, -inf),
                         "clip_grad_norm: norm_type must be > 0 or infinity, got -inf", value_error);
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(named_parameters<double>(toy), 1.0, NaN),
                         "clip_grad_norm: norm_type must be > 0 or infinity, got nan", value_error);
    backward(toy.w, D2({2, 3}, NaN));
    CHECK_THROWS_WITH_AS(optim::clip_grad_norm(toy, 1.0, 2.0, true),
                         "clip_grad_norm: the total gradient norm of order 2.000000 is non-finite (nan), so it cannot "
                         "be clipped",
                         value_error);

    using optim::WarmupCosine;
    CHECK_THROWS_WITH_AS(WarmupCosine(1e-3, 10, 5), "WarmupCosine: total_steps (5) must be >= warmup_steps (10)",
                         value_error);
    CHECK_THROWS_WITH_AS(WarmupCosine(-1, 0, 5), "WarmupCosine: base_lr and min_lr must be >= 0, got -1.000000 and "
                                                 "0.000000",
                         value_error);
    CHECK_THROWS_WITH_AS(WarmupCosine(1e-3, 0, 5, NaN),
                         "WarmupCosine: base_lr and min_lr must be >= 0, got 0.001000 and nan", value_error);
    CHECK_NOTHROW(WarmupCosine(1e-3, 0, 0).lr(3));  // no steps at all: min_lr, no division by zero
}

}  // namespace test_core_bad_input_nn
