// Logit lens, direct logit attribution and integrated gradients on nn::GPT and nn::Llama
// (inspect/attribution.hpp): the lens's last entry is the model's metric and a block that adds
// nothing leaves it unchanged; the attribution's terms sum to the metric (float64 and float32) and a
// silenced head's term is 0; integrated gradients' completeness shrinks with the steps, and
// positions equal to the baseline's get nothing.
#include <cmath>
#include <array>
#include <cstdint>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/inspect/attribution.hpp"
#include "xgrad/nn/llama.hpp"

namespace test_inspect_attribution {

using namespace xgrad;
using patching::Ids;

template <Real T>
nn::GPT<T> model_for_attribution() {
    nn::GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.vocab_size = 11;
    Generator gen(31);
    nn::GPT<T> m(c, gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.4, gen); });
    set_training(m, false);
    return m;
}
// H query heads over kv_heads key/value heads, dim wide
template <Real T>
nn::Llama<T> llama_for_attribution(std::size_t heads, std::size_t kv_heads, std::size_t dim) {
    Generator gen(31);
    nn::Llama<T> m(nn::LlamaConfig{.dim = dim, .n_layers = 2, .n_heads = heads, .n_kv_heads = kv_heads, .vocab_size = 11,
                                   .hidden_dim = 12, .max_seq_len = 6},
                   gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.4, gen); });
    set_training(m, false);
    return m;
}
const Ids clean{{1, 4, 2, 7, 3}, {5, 0, 9, 2, 8}}, corrupt{{1, 4, 6, 7, 3}, {5, 0, 3, 2, 8}};  // differ at t = 2
const patching::Metric logit_diff{.kind = patching::Metric::Kind::logit_diff, .correct = {3, 8}, .wrong = {6, 1}};

TEST_CASE("logit lens: the final residual's entry is the model's metric; a block that adds nothing changes nothing") {
    auto m = model_for_attribution<double>();
    const double metric = patching::metric(m(clean), logit_diff).value()();
    auto lens = patching::logit_lens(m, clean, logit_diff);
    REQUIRE(lens.size() == 3);
    CHECK(lens(2) == doctest::Approx(metric).epsilon(1e-12));
    CHECK(std::abs(lens(1) - lens(2)) > 1e-3);
    // block 1 silenced (its two projections zero): its input is the final residual
    for (auto* proj : {&m.transformer.h[1].attn.c_proj, &m.transformer.h[1].mlp.c_proj}) {
        proj->weight.value().fill(0);
        proj->bias.value().fill(0);
    }
    lens = patching::logit_lens(m, clean, logit_diff);
    CHECK(lens(1) == doctest::Approx(lens(2)).epsilon(1e-12));
}

// The terms sum to the metric of the model's own forward, to `relative`; the heads' are not all 0.
template <class M>
void check_terms_sum(const M& m, double relative) {
    const auto dla = patching::direct_logit_attribution(m, clean, logit_diff);
    const double metric = patching::metric(m(clean), logit_diff).value()();
    INFO("total " << dla.total << ", metric " << metric << ", relative error " << std::abs(dla.total - metric) / std::abs(metric));
    CHECK(std::abs(dla.total - metric) <= relative * std::abs(metric));
    CHECK(xt::amax(xt::abs(dla.head))() > 1e-3);
    CHECK(std::abs(dla.mlp(0)) > 1e-3);
}
// Head 0 of block 1 silenced (columns [0, D) of its out projection `weight`): its term is 0, the sum holds.
template <class M, Real T>
void check_silenced_head(const M& m, Var<T, 2>& weight, std::size_t D) {
    CHECK(std::abs(patching::direct_logit_attribution(m, clean, logit_diff).head(1, 0)) > 1e-3);
    xt::view(weight.value(), xt::all(), xt::range(0, D)) = T(0);
    CHECK(patching::direct_logit_attribution(m, clean, logit_diff).head(1, 0) == 0.0);
    check_terms_sum(m, 1e-12);
}

TEST_CASE("direct logit attribution: the terms sum to the logit difference; a silenced head's term is 0") {
    auto m = model_for_attribution<double>();
    check_terms_sum(m, 1e-12);
    check_silenced_head(m, m.transformer.h[1].attn.c_proj.weight, 4);
    check_terms_sum(model_for_attribution<float>(), 1e-5);
    CHECK_THROWS_WITH_AS(patching::direct_logit_attribution(m, clean, {.kind = patching::Metric::Kind::loss}),
                         "direct_logit_attribution: the metric must be the logit difference", value_error);
}

TEST_CASE("direct logit attribution on a grouped-query Llama: RMSNorm's terms sum to the logit difference") {
    auto m = llama_for_attribution<double>(4, 2, 16);
    check_terms_sum(m, 1e-10);
    const auto dla = patching::direct_logit_attribution(m, clean, logit_diff);
    REQUIRE(dla.head.shape() == std::array<std::size_t, 2>{2, 4});
    CHECK(xt::all(xt::equal(dla.attn_bias, 0.0)));  // no biases
    CHECK(dla.ln_bias == 0.0);
    check_silenced_head(m, m.layers[1].attention.wo.weight, 4);
    check_terms_sum(llama_for_attribution<float>(4, 2, 16), 1e-5);
}

TEST_CASE("integrated gradients: completeness shrinks with the steps; what equals the baseline gets nothing") {
    const auto m = model_for_attribution<double>();
    double previous = 1e300;
    for (std::size_t steps : {2, 8, 32}) {
        // max_rows 6: three steps of B = 2 rows a forward, the last group partial
        const auto ig = patching::integrated_gradients(m, clean, corrupt, logit_diff, steps, 6);
        INFO("steps " << steps << ": completeness " << ig.completeness);
        CHECK(ig.from == doctest::Approx(patching::metric(m(clean), logit_diff).value()()).epsilon(1e-12));
        CHECK(ig.baseline == doctest::Approx(patching::metric(m(corrupt), logit_diff).value()()).epsilon(1e-12));
        CHECK(ig.completeness < previous);
        previous = ig.completeness;
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t t : {0, 1, 3, 4}) CHECK(ig.attribution(b, t) == 0.0);
        CHECK(std::abs(ig.attribution(0, 2)) > 1e-3);
    }
    CHECK(previous < 1e-3 * std::abs(patching::metric(m(clean), logit_diff).value()() -
                                     patching::metric(m(corrupt), logit_diff).value()()));
    // zeros as the baseline: every position moves; the midpoint rule's error falls as 1/steps²
    const auto coarse = patching::integrated_gradients(m, clean, std::nullopt, logit_diff, 8);
    const auto fine = patching::integrated_gradients(m, clean, std::nullopt, logit_diff, 64);
    CHECK(std::abs(fine.attribution(0, 0)) > 1e-3);
    MESSAGE("zero baseline: completeness " << coarse.completeness << " at 8 steps, " << fine.completeness << " at 64");
    CHECK(fine.completeness < coarse.completeness / 4);
}

TEST_CASE("logit lens and integrated gradients on a grouped-query Llama: its norm and output read the residual") {
    auto m = llama_for_attribution<double>(2, 1, 8);
    const double metric = patching::metric(m(clean), logit_diff).value()();
    const double corrupt_metric = patching::metric(m(corrupt), logit_diff).value()();
    const auto ig = patching::integrated_gradients(m, clean, corrupt, logit_diff, 32);
    CHECK(ig.from == doctest::Approx(metric).epsilon(1e-12));
    CHECK(ig.baseline == doctest::Approx(corrupt_metric).epsilon(1e-12));
    CHECK(ig.completeness < 1e-3 * std::abs(metric - corrupt_metric));
    CHECK(ig.attribution(1, 0) == 0.0);
    CHECK(std::abs(ig.attribution(1, 2)) > 1e-3);
    auto lens = patching::logit_lens(m, clean, logit_diff);
    REQUIRE(lens.size() == 3);
    CHECK(lens(2) == doctest::Approx(metric).epsilon(1e-12));
    CHECK(std::abs(lens(1) - lens(2)) > 1e-3);
    m.layers[1].attention.wo.weight.value().fill(0);  // block 1 adds nothing: its input is the final residual
    m.layers[1].feed_forward.w2.weight.value().fill(0);
    lens = patching::logit_lens(m, clean, logit_diff);
    CHECK(lens(1) == doctest::Approx(lens(2)).epsilon(1e-12));
}

}  // namespace test_inspect_attribution
