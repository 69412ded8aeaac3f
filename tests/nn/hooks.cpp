// Hooks (core/hooks.hpp, ops/hook_point.hpp): a user's module with a hook point of its own; nn::GPT's
// TransformerLens hook points, their values against each other (the residual sums, the causal
// pattern), backward hooks against finite differences taken by forward hooks, patches, the
// attention paths under hooks, and the errors.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/check/random.hpp"
#include "xgrad/core/hooks.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/reduce.hpp"
#include "../support/hook_checks.hpp"

namespace test_nn_hooks {

using namespace xgrad;
using xgrad::testing::point_gradient_fd;
using Ids = xt::xtensor<std::int64_t, 2>;

// A user's module, written as the docs show: one call names its hidden layer's hook point.
struct TwoLayer {
    Var<double, 2> w1 = parameter(xt::xtensor<double, 2>{{0.5, -1.0, 0.3}, {0.8, 0.2, -0.6}});   // (2, 3)
    Var<double, 2> w2 = parameter(xt::xtensor<double, 2>{{1.5, -0.7}, {0.4, 0.9}, {-1.1, 0.6}});  // (3, 2)
    Var<double, 0> loss(const Var<double, 2>& x) const {
        const NameScope in_mlp("mlp");
        const Var<double, 2> h = hook_point(Var<double, 2>(tanh(matmul(x, w1))), "hook_hidden");  // (B, 3)
        return sum(pow(matmul(h, w2), 2.0));
    }
};

TEST_CASE("hooks: a user's module names a point with one call; read, replaced, its gradient read and changed") {
    const TwoLayer m;
    const auto x = constant(xt::xtensor<double, 2>{{0.3, -0.2}, {1.0, 0.5}, {-0.4, 0.9}, {0.1, 0.7}});
    const double plain = m.loss(x).value()();

    ActivationCache cache;
    Hooks hooks;
    cache.attach(hooks, "*", true);
    Var<double, 0> loss;
    {
        const UseHooks use(hooks);
        loss = m.loss(x);
    }
    backward(loss);
    REQUIRE(cache.names() == std::vector<std::string>{"mlp.hook_hidden"});
    CHECK(loss.value()() == plain);  // a cache changes nothing
    const auto& h = cache.value<double, 2>("mlp.hook_hidden");
    for (std::size_t b = 0; b < 4; ++b)
        for (std::size_t j = 0; j < 3; ++j)
            CHECK(h(b, j) == doctest::Approx(std::tanh(x.value()(b, 0) * m.w1.value()(0, j) +
                                                       x.value()(b, 1) * m.w1.value()(1, j))).epsilon(1e-14));
    const auto fd = point_gradient_fd<2>("mlp.hook_hidden", {4, 3}, [&] { return m.loss(x); });
    const auto& g = cache.grad<double, 2>("mlp.hook_hidden");
    CHECK(xt::amax(xt::abs(g))() > 0.1);
    CHECK(xt::allclose(g, fd, 1e-6, 1e-8));

    // a replacement: the hidden layer zeroed gives loss 0; a gradient hook that zeroes dL/dh stops
    // every gradient below it (w1's)
    Hooks zero;
    zero.forward("mlp.hook_hidden", [](const Var<double, 2>& v) { return Var<double, 2>(v * 0.0); });
    {
        const UseHooks use(zero);
        CHECK(m.loss(x).value()() == 0.0);
    }
    Hooks stop;
    stop.backward("mlp.hook_hidden", [](xt::xtensor<double, 2>& grad) { grad.fill(0); });
    m.w1.zero_grad(), m.w2.zero_grad();
    {
        const UseHooks use(stop);
        loss = m.loss(x);
    }
    backward(loss);
    CHECK(xt::amax(xt::abs(m.w1.grad()))() == 0.0);
    CHECK(xt::amax(xt::abs(m.w2.grad()))() > 0.1);
}

TEST_CASE("hooks: a hook of another type or rank, and a replacement of another shape, are errors naming the point") {
    const TwoLayer m;
    const auto x = constant(xt::xtensor<double, 2>{{0.3, -0.2}});
    Hooks wrong_rank;
    wrong_rank.forward("mlp.*", [](const Var<double, 3>&) {});
    const UseHooks use(wrong_rank);
    CHECK_THROWS_WITH_AS(m.loss(x), doctest::Contains("hook mlp.hook_hidden: the point holds a float64 rank 2 value"),
                         value_error);
    Hooks wrong_shape;
    wrong_shape.forward("mlp.hook_hidden", [](const Var<double, 2>& v) { return sum(v, 0, keepdims); });
    const UseHooks use_shape(wrong_shape);
    CHECK_THROWS_WITH_AS(m.loss(constant(xt::xtensor<double, 2>{{0.3, -0.2}, {0.1, 0.1}})),
                         doctest::Contains("hook mlp.hook_hidden: the hook returned (1, 3) for a value of (2, 3)"),
                         shape_error);
    CHECK(hook_name_matches("blocks.*.attn.hook_z", "blocks.10.attn.hook_z"));
    CHECK(!hook_name_matches("blocks.*.attn.hook_z", "blocks.1.attn.hook_q"));
    CHECK(hook_name_matches("*", "anything"));
}

nn::GPT<double> small_gpt(std::uint64_t seed) {
    nn::GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.vocab_size = 11;
    Generator gen(seed);
    nn::GPT<double> m(c, gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.5, gen); });
    set_training(m, false);
    return m;
}
const Ids idx{{1, 4, 2, 7, 3}, {5, 0, 9, 2, 2}}, targets{{4, 2, 7, 3, 1}, {0, 9, 2, 2, 6}};

TEST_CASE("hooks: nn::GPT's points under TransformerLens's names, their values consistent with each other") {
    const auto m = small_gpt(3);
    ActivationCache cache;
    Hooks hooks;
    cache.attach(hooks);
    const UseHooks use(hooks);
    const double loss = m.loss(idx, targets).value()();
    std::vector<std::string> want{"hook_pos_embed", "hook_embed"};
    for (const std::string l : {"0", "1"})
        for (const char* p : {"hook_resid_pre", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_attn_scores",
                              "attn.hook_pattern", "attn.hook_z", "hook_attn_out", "hook_resid_mid", "mlp.hook_post",
                              "hook_mlp_out", "hook_resid_post"})
            want.push_back("blocks." + l + "." + p);
    want.push_back("ln_final.hook_normalized");
    CHECK(cache.names() == want);
    xgrad::testing::check_residual_sums(cache, 2);
    for (const std::string b : {"blocks.0.", "blocks.1."}) {
        // causal: the pattern's rows sum to 1, nothing above the diagonal; the scores there -inf
        const auto& pattern = cache.value<double, 4>(b + "attn.hook_pattern");
        const auto& scores = cache.value<double, 4>(b + "attn.hook_attn_scores");
        REQUIRE(pattern.shape() == std::array<std::size_t, 4>{2, 2, 5, 5});
        CHECK(xt::allclose(xt::sum(pattern, {3}), xt::ones<double>({2, 2, 5})));
        for (std::size_t i = 0; i < 5; ++i)
            for (std::size_t j = i + 1; j < 5; ++j) {
                CHECK(pattern(1, 1, i, j) == 0.0);
                CHECK(scores(1, 1, i, j) == -INFINITY);
            }
        CHECK(cache.value<double, 4>(b + "attn.hook_q").shape() == std::array<std::size_t, 4>{2, 5, 2, 4});
        CHECK(cache.value<double, 4>(b + "attn.hook_z").shape() == std::array<std::size_t, 4>{2, 5, 2, 4});
    }
    CHECK(xt::allclose(cache.value<double, 3>("blocks.0.hook_resid_pre"),
                       cache.value<double, 3>("hook_embed") + cache.value<double, 2>("hook_pos_embed")));
    // the hooks (the reference path for the pattern) change no value
    Hooks none;
    const UseHooks use_none(none);
    CHECK(std::abs(m.loss(idx, targets).value()() - loss) < 1e-12);
}

TEST_CASE("hooks: nn::GPT's backward hooks give dL/d(point) as finite differences do, on every attention path") {
    const auto m = small_gpt(5);
    xgrad::testing::check_point_gradients({"blocks.0.attn.hook_z", "blocks.1.attn.hook_pattern", "blocks.0.hook_resid_mid",
                                           "blocks.1.attn.hook_q", "blocks.0.attn.hook_attn_scores", "ln_final.hook_normalized"},
                                          [&] { return m.loss(idx, targets); });
}

TEST_CASE("hooks: a head patched from the clean run; the whole residual patched restores the clean logits") {
    const auto m = small_gpt(7);
    const Ids clean{{1, 4, 2, 7, 3}}, corrupt{{1, 4, 9, 7, 3}};
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep);
    Var<double, 3> clean_logits;
    {
        const UseHooks use(keep);
        clean_logits = m(clean);
    }
    const Var<double, 3> corrupt_logits = m(corrupt);
    // patching resid_pre of block 0 everywhere: the corrupted run becomes the clean one
    Hooks all;
    all.forward("blocks.0.hook_resid_pre", [&](const Var<double, 3>& v, std::string_view name) {
        return patch_at(v, cache.value<double, 3>(std::string(name)), {-1, -1, -1});
    });
    {
        const UseHooks use(all);
        CHECK(xt::allclose(m(corrupt).value(), clean_logits.value(), 1e-12, 1e-12));
    }
    // one head at one position: only that head's slice of z changes, and the logits move
    Hooks head;
    Var<double, 4> patched;
    head.forward("blocks.1.attn.hook_z", [&](const Var<double, 4>& z, std::string_view name) {
        patched = patch_at(z, cache.value<double, 4>(std::string(name)), {-1, 4, 1, -1});
        return patched;
    });
    Var<double, 3> logits;
    {
        const UseHooks use(head);
        logits = m(corrupt);
    }
    const auto& clean_z = cache.value<double, 4>("blocks.1.attn.hook_z");
    CHECK(xt::allclose(xt::view(patched.value(), xt::all(), 4, 1, xt::all()), xt::view(clean_z, xt::all(), 4, 1, xt::all())));
    CHECK(xt::amax(xt::abs(xt::view(logits.value(), 0, 4, xt::all()) - xt::view(corrupt_logits.value(), 0, 4, xt::all())))() > 1e-3);
    CHECK(xt::allclose(xt::view(logits.value(), 0, xt::range(0, 4), xt::all()),
                       xt::view(corrupt_logits.value(), 0, xt::range(0, 4), xt::all()), 1e-12, 1e-12));
}

TEST_CASE("hooks: MultiheadAttention's points; q/k/v/z hooks keep the fast paths' output, scores take the reference") {
    Generator gen(3);
    nn::MultiheadAttention<double> mha({.embed_dim = 8, .num_heads = 2, .batch_first = true}, gen);
    const auto x = parameter(xt::xtensor<double, 3>(randn<3>({2, 5, 8}, 4)));
    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(xt::xtensor<bool, 2>{{false, false, false, true, true}, {false, false, false, false, false}});
    fo.need_weights = false;
    const xt::xtensor<double, 3> plain = mha.forward(x, x, x, fo).output.value();
    for (const char* point : {"hook_q", "hook_v", "hook_z", "hook_pattern"}) {
        INFO(std::string(point));
        ActivationCache cache;
        Hooks hooks;
        cache.attach(hooks, point);
        const UseHooks use(hooks);
        CHECK(xt::allclose(mha.forward(x, x, x, fo).output.value(), plain, 1e-12, 1e-12));
        CHECK(cache.names() == std::vector<std::string>{point});
    }
    ActivationCache cache;
    Hooks hooks;
    cache.attach(hooks, "hook_attn_scores");
    const UseHooks use(hooks);
    mha.forward(x, x, x, fo);
    const auto& scores = cache.value<double, 4>("hook_attn_scores");  // (B, H, L, S): padded keys -inf in row 0
    CHECK(scores(0, 1, 2, 3) == -INFINITY);
    CHECK(std::isfinite(scores(1, 1, 2, 3)));
}

TEST_CASE("hooks: nn::Transformer's layers under their state-dict paths, the residual stream's parts adding up") {
    Generator gen(9);
    nn::TransformerOptions o;
    o.layer = {.d_model = 8, .nhead = 2, .dim_feedforward = 16, .dropout = 0.0, .batch_first = true, .norm_first = true};
    o.num_encoder_layers = 1, o.num_decoder_layers = 1;
    nn::Transformer<double> t(o, gen);
    set_training(t, false);
    const auto src = constant(xt::xtensor<double, 3>(randn<3>({2, 5, 8}, 1)));
    const auto tgt = constant(xt::xtensor<double, 3>(randn<3>({2, 4, 8}, 2)));
    const xt::xtensor<double, 3> plain = t.forward(src, tgt).value();
    ActivationCache cache;
    Hooks hooks;
    cache.attach(hooks);
    const UseHooks use(hooks);
    CHECK(xt::allclose(t.forward(src, tgt).value(), plain, 1e-12, 1e-12));
    for (const char* name : {"encoder.layers.0.hook_resid_pre", "encoder.layers.0.self_attn.hook_pattern",
                             "encoder.layers.0.hook_mlp_out", "decoder.layers.0.multihead_attn.hook_z",
                             "decoder.layers.0.hook_cross_attn_out", "decoder.layers.0.hook_resid_post"})
        CHECK_MESSAGE(cache.has_value(name), name);
    // pre-norm: each residual is the one before plus its sublayer's part
    const std::string e = "encoder.layers.0.", d = "decoder.layers.0.";
    CHECK(xt::allclose(cache.value<double, 3>(e + "hook_resid_mid"),
                       cache.value<double, 3>(e + "hook_resid_pre") + cache.value<double, 3>(e + "hook_attn_out")));
    CHECK(xt::allclose(cache.value<double, 3>(d + "hook_resid_mid_cross"),
                       cache.value<double, 3>(d + "hook_resid_mid") + cache.value<double, 3>(d + "hook_cross_attn_out")));
    CHECK(xt::allclose(cache.value<double, 3>(d + "hook_resid_post"),
                       cache.value<double, 3>(d + "hook_resid_mid_cross") + cache.value<double, 3>(d + "hook_mlp_out")));
    const auto& pattern = cache.value<double, 4>(d + "multihead_attn.hook_pattern");  // (B, H, T, S)
    REQUIRE(pattern.shape() == std::array<std::size_t, 4>{2, 2, 4, 5});
    CHECK(xt::allclose(xt::sum(pattern, {3}), xt::ones<double>({2, 2, 4})));
}

}  // namespace test_nn_hooks
