// Patching queries and keys (inspect/query_key.hpp): the batched exact sweep against one patched
// forward, and AtP*'s recomputed softmax against AtP's linearization: closer to exact patching for
// each query and each key, the more so where attention is sharp (the case AtP* corrects).
#include <cmath>
#include <cstdint>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/inspect/query_key.hpp"

namespace test_inspect_query_key {

using namespace xgrad;
using patching::Ids;

// Two layers, attention made sharp: the query and key rows of c_attn scaled up.
nn::GPT<double> sharp_model(double sharpness) {
    nn::GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 8, c.vocab_size = 11;
    Generator gen(41);
    nn::GPT<double> m(c, gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.4, gen); });
    for (auto& block : m.transformer.h)
        xt::view(block.attn.c_attn.weight.value(), xt::range(0, 16), xt::all()) *= sharpness;  // q and k rows
    set_training(m, false);
    return m;
}
const Ids clean{{1, 4, 2, 7, 3, 9, 5}, {5, 0, 9, 2, 8, 6, 1}}, corrupt{{1, 4, 6, 7, 0, 9, 5}, {5, 3, 9, 2, 8, 10, 1}};
const patching::Metric logit_diff{.kind = patching::Metric::Kind::logit_diff, .correct = {3, 8}, .wrong = {6, 1}};

double total_error(const xt::xtensor<double, 3>& a, const xt::xtensor<double, 3>& b) { return xt::sum(xt::abs(a - b))(); }
double total_error(const xt::xtensor<double, 2>& a, const xt::xtensor<double, 2>& b) { return xt::sum(xt::abs(a - b))(); }

TEST_CASE("query and key patching: the exact sweep is one patched forward per patch") {
    const auto m = sharp_model(1.0);
    const auto r = patching::query_key_patching(m, clean, corrupt, logit_diff, 5);
    const double into = patching::metric(m(corrupt), logit_diff).value()();
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep, "blocks.1.attn.hook_k");
    {
        const UseHooks use(keep);
        m(clean);
    }
    for (long s : {0, 3, 6}) {
        Hooks patch;
        patch.forward("blocks.1.attn.hook_k", [&](const Var<double, 4>& k) {
            return patch_at(k, cache.value<double, 4>("blocks.1.attn.hook_k"), {-1, s, 1, -1});
        });
        const UseHooks use(patch);
        CHECK(r.exact.k_head_pos(1, 1, s) == doctest::Approx(patching::metric(m(corrupt), logit_diff).value()() - into).epsilon(1e-10));
    }
    // a key past the last query's reach changes nothing; the query at 0 sees one key, whatever it is
    CHECK(r.exact.q_head_pos(0, 0, 0) == doctest::Approx(0).scale(1));
    CHECK(std::abs(r.atp_star.q_head_pos(0, 0, 0)) < 1e-12);
    CHECK(xt::amax(xt::abs(r.exact.k_head_pos))() > 1e-3);
}

TEST_CASE("AtP*: with sharp attention, the recomputed softmax is closer to exact patching than AtP's linearization") {
    for (double sharpness : {1.0, 4.0}) {
        const auto m = sharp_model(sharpness);
        const auto r = patching::query_key_patching(m, clean, corrupt, logit_diff);
        const double atp_k = total_error(r.atp.k_head_pos, r.exact.k_head_pos),
                     star_k = total_error(r.atp_star.k_head_pos, r.exact.k_head_pos);
        const double atp_q = total_error(r.atp.q_head_pos, r.exact.q_head_pos),
                     star_q = total_error(r.atp_star.q_head_pos, r.exact.q_head_pos);
        const double scale_k = xt::sum(xt::abs(r.exact.k_head_pos))(), scale_q = xt::sum(xt::abs(r.exact.q_head_pos))();
        MESSAGE("sharpness " << sharpness << ": keys, AtP error " << atp_k / scale_k << ", AtP* " << star_k / scale_k
                             << "; queries, AtP " << atp_q / scale_q << ", AtP* " << star_q / scale_q
                             << " (relative to the exact effects' sum)");
        CHECK(star_k < atp_k);
        CHECK(star_q < atp_q);
    }
}

}  // namespace test_inspect_query_key
