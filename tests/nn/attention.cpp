// scaled_dot_product_attention and nn::MultiheadAttention: initialization, dropout, errors, SDPA's
// mask types. Values (PyTorch parity and by hand): attention_parity.cpp. Their gradchecks (every
// flag combination and mask kind): checks/attention.cpp and attention_flags.cpp.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_attention {

using namespace xgrad;
using Mha = nn::MultiheadAttention<double>;

namespace {

constexpr double inf = std::numeric_limits<double>::infinity();

template <class A>
bool all_finite(const A& a) {
    return std::all_of(a.begin(), a.end(), [](double x) { return std::isfinite(x); });
}

}  // namespace

TEST_CASE("MultiheadAttention initialization, parameter names and shapes as torch") {
    Generator g(5);
    Mha m({.embed_dim = 8, .num_heads = 2, .add_bias_kv = true}, g);
    std::vector<std::string> names;
    for (const auto& p : named_parameters<double>(m)) names.push_back(p.name + shape_str(p.shape));
    CHECK(names == std::vector<std::string>{"in_proj_weight(24, 8)", "in_proj_bias(24,)", "bias_k(1, 1, 8)",
                                            "bias_v(1, 1, 8)", "out_proj.weight(8, 8)", "out_proj.bias(8,)"});
    CHECK(xt::all(xt::equal(m.in_proj_bias.value(), 0.0)));
    CHECK(xt::all(xt::equal(m.out_proj.bias.value(), 0.0)));
    CHECK(xt::amax(xt::abs(m.in_proj_weight.value()))() <= std::sqrt(6.0 / (8 + 24)));  // xavier_uniform
    CHECK(xt::amax(xt::abs(m.out_proj.weight.value()))() <= 1 / std::sqrt(8.0));          // Linear's kaiming
    CHECK(xt::amax(xt::abs(m.bias_k.value()))() > 0);                                      // xavier_normal

    Mha s({.embed_dim = 4, .num_heads = 1, .bias = false, .kdim = 3, .vdim = 6}, g);
    names.clear();
    for (const auto& p : named_parameters<double>(s)) names.push_back(p.name + shape_str(p.shape));
    CHECK(names == std::vector<std::string>{"q_proj_weight(4, 4)", "k_proj_weight(4, 3)", "v_proj_weight(4, 6)",
                                            "out_proj.weight(4, 4)"});
    CHECK(xt::amax(xt::abs(s.v_proj_weight.value()))() <= std::sqrt(6.0 / (4 + 6)));
}

TEST_CASE("MultiheadAttention dropout: deterministic with the Generator, off in eval") {
    Generator init(1);
    Mha m({.embed_dim = 4, .num_heads = 2, .dropout = 0.5}, init);
    Generator& drop = *m.dropout_generator;  // its own, seeded from `init`
    const auto x = constant(randn<3>({3, 2, 4}, 1));
    nn::MhaForwardOptions<double> per_head{.average_attn_weights = false};
    drop.manual_seed(9);
    const auto w1 = m.forward(x, x, x, per_head).attn_weights_per_head.value();
    drop.manual_seed(9);
    const auto w2 = m.forward(x, x, x, per_head).attn_weights_per_head.value();
    CHECK(w1 == w2);
    CHECK(xt::any(xt::equal(w1, 0.0)));
    CHECK(xt::any(xt::greater(w1, 1.0 / 0.5 * 0.26)));  // kept weights are scaled by 1/(1-p)
    m.dropout_generator.reset();
    CHECK_THROWS_AS(m.forward(x, x, x), value_error);
    set_training(m, false);
    const auto w3 = m.forward(x, x, x, per_head).attn_weights_per_head.value();
    CHECK(xt::allclose(xt::sum(w3, {3}), 1.0));
}

TEST_CASE("MultiheadAttention errors name the op, the operand and both shapes") {
    Generator g;
    auto msg_of = [](auto&& f) {
        try {
            f();
        } catch (const xgrad::error& e) {
            return std::string(e.what());
        }
        return std::string("no exception");
    };
    CHECK_THROWS_AS(Mha({.embed_dim = 6, .num_heads = 4}, g), value_error);
    CHECK_THROWS_AS(Mha({.embed_dim = 0, .num_heads = 1}, g), value_error);
    CHECK_THROWS_AS(Mha({.embed_dim = 4, .num_heads = 2, .kdim = 0}, g), value_error);
    CHECK_THROWS_AS(Mha({.embed_dim = 4, .num_heads = 2, .dropout = 1.5}, g), value_error);
    const auto x0 = constant(randn<2>({3, 4}));
    CHECK_THROWS_AS(Mha().forward(x0, x0, x0), value_error);

    Mha m({.embed_dim = 4, .num_heads = 2, .kdim = 3}, g);
    const auto q = constant(randn<3>({3, 2, 4})), k = constant(randn<3>({5, 2, 3})), v = constant(randn<3>({5, 2, 4}));
    CHECK_NOTHROW(m.forward(q, k, v));
    CHECK_THROWS_AS(m.forward(constant(randn<3>({3, 2, 5})), k, v), shape_error);
    CHECK(msg_of([&] { m.forward(q, v, v); }) ==
          "MultiheadAttention: key has shape (5, 2, 4) but its last dim must be kdim = 3");
    CHECK_THROWS_AS(m.forward(q, k, constant(randn<3>({4, 2, 4}))), shape_error);  // S differs
    CHECK_THROWS_AS(m.forward(q, constant(randn<3>({5, 3, 3})), constant(randn<3>({5, 3, 4}))), shape_error);  // N

    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({2, 4})));
    CHECK(msg_of([&] { m.forward(q, k, v, fo); }) ==
          "MultiheadAttention: key_padding_mask (ignore_mask) has shape (2, 4) but expected (2, 5) (N, S) for query (3, 2, 4) "
          "and key (5, 2, 3)");
    fo = {};
    fo.attn_mask = additive_mask(xt::xarray<double>(xt::zeros<double>({2, 3, 5})));
    CHECK(msg_of([&] { m.forward(q, k, v, fo); }) ==
          "MultiheadAttention: attn_mask (additive_mask) has shape (2, 3, 5) but expected (3, 5) (L, S) or (4, 3, 5) "
          "(N*num_heads, L, S) for query (3, 2, 4) and key (5, 2, 3)");
    fo.attn_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({5, 3})));
    CHECK_THROWS_AS(m.forward(q, k, v, fo), shape_error);
    fo = {};
    fo.valid_lens = valid_lens(xt::xtensor<std::int64_t, 1>{1, 2, 3});
    CHECK_THROWS_AS(m.forward(q, k, v, fo), shape_error);
    fo.valid_lens = valid_lens(xt::xtensor<std::int64_t, 1>{1, -2});
    CHECK_THROWS_AS(m.forward(q, k, v, fo), value_error);
    // unbatched: key_padding_mask (S), 3-D attn_mask (num_heads, L, S)
    const auto q2 = constant(randn<2>({3, 4})), k2 = constant(randn<2>({5, 3})), v2 = constant(randn<2>({5, 4}));
    fo = {};
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({1, 5})));
    CHECK_THROWS_AS(m.forward(q2, k2, v2, fo), shape_error);
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({5})));
    fo.attn_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({2, 3, 5})));
    CHECK_NOTHROW(m.forward(q2, k2, v2, fo));
}

// ---- scaled_dot_product_attention ----

TEST_CASE("scaled_dot_product_attention: mask types, causal, scale, fully masked rows") {
    const auto q = parameter(xt::xtensor<double, 3>{{{0, 0}, {1, 0}}});  // (B=1, L=2, E=2)
    const auto k = parameter(xt::xtensor<double, 3>{{{1, 0}, {0, 1}, {2, 0}}});
    const auto v = parameter(xt::xtensor<double, 3>{{{1, 2}, {3, 4}, {5, 6}}});
    // keep_mask (SDPA's bool meaning: true = attend) and ignore_mask (MHA's) of the same positions agree
    const xt::xtensor<bool, 2> keep{{true, true, false}, {false, false, false}};
    auto y = scaled_dot_product_attention(q, k, v, keep_mask(keep));
    const auto y_ignore = scaled_dot_product_attention(q, k, v, ignore_mask(!keep));
    CHECK(y.value() == y_ignore.value());
    CHECK(y.value()(0, 0, 0) == doctest::Approx(2.0));  // a zero query: mean of values 0, 1
    CHECK(y.value()(0, 1, 0) == 0.0);                    // fully masked row: zeros, not NaN
    backward(y, xt::xtensor<double, 3>(xt::ones<double>({1, 2, 2})));
    CHECK(all_finite(q.grad()));
    CHECK(q.grad()(0, 1, 0) == 0.0);

    // query 1 scores k with scale 1: (1, 0, 2); causal keeps keys 0, 1
    const auto w = scaled_dot_product_attention_with_weights(q, k, v, no_mask, 0.0, true, 1.0).weights.value();
    const double e = std::exp(1.0);
    CHECK(w(0, 1, 0) == doctest::Approx(e / (e + 1)));
    CHECK(w(0, 0, 1) == 0.0);
    // additive mask and valid_lens
    const auto a = scaled_dot_product_attention(q, k, v, additive_mask(xt::xtensor<double, 1>{0, std::log(3.0), -inf}));
    CHECK(a.value()(0, 0, 1) == doctest::Approx(0.25 * 2 + 0.75 * 4));
    const auto vl = scaled_dot_product_attention(q, k, v, valid_lens(xt::xtensor<std::int64_t, 1>{1}));
    CHECK(vl.value()(0, 1, 1) == doctest::Approx(2.0));
}

TEST_CASE("scaled_dot_product_attention shape and argument errors") {
    const auto q = randn<4>({2, 2, 3, 4}, 1), k = randn<4>({2, 2, 5, 4}, 2), v = randn<4>({2, 2, 5, 3}, 3);
    const auto cq = constant(q), ck = constant(k), cv = constant(v);
    CHECK_THROWS_AS(scaled_dot_product_attention(cq, cv, cv), shape_error);  // E differs
    CHECK_THROWS_AS(scaled_dot_product_attention(cq, ck, constant(randn<4>({2, 2, 4, 3}))), shape_error);  // S
    CHECK_THROWS_AS(scaled_dot_product_attention(cq, constant(randn<4>({2, 3, 5, 4})), cv), shape_error);  // leading
    CHECK_THROWS_AS(scaled_dot_product_attention(cq, ck, cv, no_mask, 0.5), value_error);  // dropout needs gen
    CHECK_THROWS_AS(scaled_dot_product_attention(cq, ck, cv, keep_mask(xt::xtensor<bool, 2>(xt::ones<bool>({3, 4})))),
                    shape_error);
}

TEST_CASE("MultiheadAttention: an empty query sequence (L = 0) with a key_padding_mask and a bool attn_mask") {
    Generator gen(1);
    Mha mha({.embed_dim = 4, .num_heads = 2}, gen);
    const auto kv = parameter(randn<3>({3, 2, 4}, 2));
    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>{{false, true, false}, {false, false, true}});
    const auto r = mha.forward(parameter(xt::xtensor<double, 3>::from_shape({0, 2, 4})), kv, kv, fo);
    CHECK(r.output.value().shape() == std::array<std::size_t, 3>{0, 2, 4});
    fo.attn_mask = ignore_mask(xt::xarray<bool>::from_shape({0, 3}));  // expands the key mask's rows
    const auto r2 = mha.forward(parameter(xt::xtensor<double, 3>::from_shape({0, 2, 4})), kv, kv, fo);
    CHECK(r2.output.value().shape() == std::array<std::size_t, 3>{0, 2, 4});
    // without need_weights (the fused op), with a float mask too; the keys and values get zero gradient
    fo.need_weights = false;
    fo.key_padding_mask = additive_mask(xt::xarray<double>{{0.5, -inf, 1.0}, {0.0, 2.0, -inf}});
    const auto r3 = mha.forward(parameter(xt::xtensor<double, 3>::from_shape({0, 2, 4})), kv, kv, fo);
    CHECK(r3.output.value().shape() == std::array<std::size_t, 3>{0, 2, 4});
    backward(sum(r3.output));
    CHECK(xt::amax(xt::abs(kv.grad()))() == 0.0);
}

}  // namespace test_nn_attention
