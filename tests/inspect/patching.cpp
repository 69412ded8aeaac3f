// Activation and attribution patching on nn::GPT and on a grouped-query nn::Llama
// (inspect/patching.hpp): the batched sweep against one patched forward at a time, the first layer's
// residual (where patching a differing position gives the clean metric exactly), AtP equal to exact
// patching where the metric is linear in the patched value, the loss metric, bad input.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/inspect/patching.hpp"
#include "xgrad/nn/llama.hpp"

namespace test_inspect_patching {

using namespace xgrad;
using patching::Ids;

// 2 layers of 2 heads, width 8, vocabulary 11, 6 positions; the Llama's 2 heads share one key/value
// head (its caches are narrower than the residual).
template <class M>
M model_for_patching() {
    Generator gen(21);
    M m;
    if constexpr (std::is_same_v<M, nn::GPT<double>>)
        m = M(nn::GPTConfig{.n_layer = 2, .n_head = 2, .n_embd = 8, .block_size = 6, .vocab_size = 11}, gen);
    else
        m = M(nn::LlamaConfig{.dim = 8, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1, .vocab_size = 11, .hidden_dim = 12,
                              .max_seq_len = 6},
              gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.4, gen); });
    set_training(m, false);
    return m;
}
#define PATCHED_MODELS nn::GPT<double>, nn::Llama<double>
const Ids clean{{1, 4, 2, 7, 3}, {5, 0, 9, 2, 8}}, corrupt{{1, 4, 6, 7, 3}, {5, 0, 3, 2, 8}};  // differ at t = 2
const patching::Metric logit_diff{.kind = patching::Metric::Kind::logit_diff, .correct = {3, 8}, .wrong = {6, 1}};

// The metric of `into` with one patch of `point`, one forward alone.
template <std::size_t N, class M>
double patched_once(const M& m, const Ids& from, const Ids& into, const std::string& point,
                    const std::array<long, N>& index, const patching::Metric& metric = logit_diff) {
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep, point);
    {
        const UseHooks use(keep);
        m(from);
    }
    Hooks patch;
    patch.forward(point, [&](const Var<double, N>& v) { return patch_at(v, cache.value<double, N>(point), index); });
    const UseHooks use(patch);
    return patching::metric(m(into), metric).value()();
}

TEST_CASE_TEMPLATE("activation patching: the batched sweep equals one patched forward at a time", M, PATCHED_MODELS) {
    const auto m = model_for_patching<M>();
    // 3 rows a forward: groups of one patch (B = 2), so the last group of each sweep is partial too
    for (std::size_t max_rows : {3, 256}) {
        const auto r = patching::activation_patching(m, clean, corrupt, logit_diff, max_rows);
        CHECK(r.from == doctest::Approx(patching::metric(m(clean), logit_diff).value()()).epsilon(1e-12));
        CHECK(r.into == doctest::Approx(patching::metric(m(corrupt), logit_diff).value()()).epsilon(1e-12));
        REQUIRE(r.head_pos.shape() == std::array<std::size_t, 3>{2, 2, 5});
        for (std::size_t l = 0; l < 2; ++l) {
            const std::string z = "blocks." + std::to_string(l) + ".attn.hook_z";
            for (long h = 0; h < 2; ++h) {
                CHECK(r.head(l, h) == doctest::Approx(patched_once<4, M>(m, clean, corrupt, z, {-1, -1, h, -1})).epsilon(1e-10));
                for (long t : {1, 2, 4})
                    CHECK(r.head_pos(l, h, t) ==
                          doctest::Approx(patched_once<4, M>(m, clean, corrupt, z, {-1, t, h, -1})).epsilon(1e-10));
            }
            for (long t : {0, 2, 3}) {
                const std::string mlp = "blocks." + std::to_string(l) + ".hook_mlp_out";
                CHECK(r.mlp_out(l, t) == doctest::Approx(patched_once<3, M>(m, clean, corrupt, mlp, {-1, t, -1})).epsilon(1e-10));
            }
        }
        // layer 0's residual is the embeddings: the position that differs carries all of it
        for (std::size_t t = 0; t < 5; ++t)
            CHECK(r.resid_pre(0, t) == doctest::Approx(t == 2 ? r.from : r.into).epsilon(1e-12));
        // the heads of layer 0 see the corruption only from position 2 on
        CHECK(r.head_pos(0, 1, 0) == doctest::Approx(r.into).epsilon(1e-12));
        CHECK(std::abs(r.from - r.into) > 0.01);
    }
}

TEST_CASE_TEMPLATE("attribution patching: first-order, exact where the metric is linear in the patched value", M, PATCHED_MODELS) {
    const auto m = model_for_patching<M>();
    const auto atp = patching::attribution_patching(m, clean, corrupt, logit_diff);
    const auto exact = patching::activation_patching(m, clean, corrupt, logit_diff);
    CHECK(atp.into == doctest::Approx(exact.into).epsilon(1e-12));
    CHECK(atp.from == doctest::Approx(exact.from).epsilon(1e-12));
    REQUIRE(atp.head.shape() == exact.head.shape());
    // a head's estimate is the sum of its positions' estimates
    for (std::size_t l = 0; l < 2; ++l)
        for (std::size_t h = 0; h < 2; ++h)
            CHECK(atp.head(l, h) == doctest::Approx(xt::sum(xt::view(atp.head_pos, l, h, xt::all()))()).epsilon(1e-12));
    CHECK(xt::amax(xt::abs(atp.resid_pre))() > 0.01);
    // ln_final.hook_normalized -> logits is linear: AtP there is exact patching
    ActivationCache from, into;
    Hooks keep_from, keep_into;
    from.attach(keep_from, "ln_final.hook_normalized");
    into.attach(keep_into, "ln_final.hook_normalized", true);
    {
        const UseHooks use(keep_from);
        m(clean);
    }
    Var<double, 0> value;
    {
        const UseHooks use(keep_into);
        value = patching::metric(m(corrupt), logit_diff);
    }
    backward(value);
    const std::string point = "ln_final.hook_normalized";
    const std::vector<patching::detail::Patch<3>> positions{{0, -1}, {2, -1}, {4, -1}, {-1, -1}};
    const auto estimate = patching::detail::attribute<3>(from.value<double, 3>(point), into.value<double, 3>(point),
                                                         into.grad<double, 3>(point), positions);
    const auto run = patching::detail::resume_point(m, corrupt, logit_diff);
    const auto patched = patching::detail::sweep<3>(m, run, logit_diff, point, from.value<double, 3>(point), positions, 256);
    for (std::size_t i = 0; i < positions.size(); ++i) {
        CHECK(patched[i] - value.value()() == doctest::Approx(estimate[i]).epsilon(1e-10));
    }
    CHECK(estimate[1] == 0.0);  // the metric reads the last position only
    CHECK(std::abs(estimate[2]) > 0.01);
}

TEST_CASE_TEMPLATE("patching: the loss metric; bad input names the method and the operand", M, PATCHED_MODELS) {
    const auto m = model_for_patching<M>();
    const Ids targets{{4, 2, 7, 3, -1}, {0, 9, 2, 8, 1}};
    const patching::Metric loss{.kind = patching::Metric::Kind::loss, .targets = targets};
    const auto r = patching::activation_patching(m, clean, corrupt, loss);
    CHECK(r.into == doctest::Approx(nn::gpt_loss(m(corrupt), targets).value()()).epsilon(1e-12));
    CHECK(r.resid_pre(0, 2) == doctest::Approx(r.from).epsilon(1e-12));
    // a patch at a later position resumes there: the earlier positions' terms come from the corrupted run
    for (std::size_t l = 0; l < 2; ++l)
        for (long t = 0; t < 5; ++t) {
            const std::string block = "blocks." + std::to_string(l) + ".";
            CHECK(r.head_pos(l, 1, t) ==
                  doctest::Approx(patched_once<4, M>(m, clean, corrupt, block + "attn.hook_z", {-1, t, 1, -1}, loss)).epsilon(1e-10));
            CHECK(r.attn_out(l, t) ==
                  doctest::Approx(patched_once<3, M>(m, clean, corrupt, block + "hook_attn_out", {-1, t, -1}, loss)).epsilon(1e-10));
        }
    // the sets asked for, the others empty
    const auto heads_only = patching::activation_patching(m, clean, corrupt, loss, 256, {.head_pos = false, .resid_pre = false,
                                                                                         .attn_out = false, .mlp_out = false});
    for (std::size_t l = 0; l < 2; ++l)  // other hooks in the clean run: the same up to the fused residual adds' rounding
        for (std::size_t h = 0; h < 2; ++h) CHECK(heads_only.head(l, h) == doctest::Approx(r.head(l, h)).epsilon(1e-12));
    CHECK(heads_only.head_pos.size() == 0);
    CHECK(heads_only.mlp_out.size() == 0);
    const patching::Metric short_metric{.correct = {3}, .wrong = {6}};
    CHECK_THROWS_WITH_AS(patching::activation_patching(m, clean, corrupt, short_metric),
                         "activation_patching: 1 correct and 1 wrong tokens for a batch of 2", shape_error);
    const patching::Metric outside{.correct = {3, 11}, .wrong = {6, 1}};
    CHECK_THROWS_WITH_AS(patching::attribution_patching(m, clean, corrupt, outside),
                         "attribution_patching: a token of row 1 is not in [0, 11)", value_error);
    CHECK_THROWS_AS(patching::activation_patching(m, clean, Ids{{1, 2}}, logit_diff), shape_error);
}

}  // namespace test_inspect_patching
