// Patching queries and keys (inspect/query_key.hpp) on nn::GPT and a grouped-query nn::Llama (its
// rotated queries and keys): the batched exact sweep against one patched forward, and AtP*'s
// recomputed softmax against AtP's linearization: closer to exact patching for each query and each
// key, the more so where attention is sharp (the case AtP* corrects). Every estimate on nanoGPT's
// model.py against PyTorch (tests/fixtures/make_patch.py, the fixtures of `xgrad patch`).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "study/gpt_files.hpp"
#include "study/json_config.hpp"
#include "support/fixtures.hpp"
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
// The same for a Llama of 4 query heads over 2 key/value heads: wq and wk scaled up.
nn::Llama<double> sharp_llama(double sharpness) {
    Generator gen(41);
    nn::Llama<double> m(nn::LlamaConfig{.dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .vocab_size = 11,
                                        .hidden_dim = 12, .max_seq_len = 8},
                        gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.4, gen); });
    for (auto& layer : m.layers) layer.attention.wq.weight.value() *= sharpness, layer.attention.wk.weight.value() *= sharpness;
    set_training(m, false);
    return m;
}
const Ids clean{{1, 4, 2, 7, 3, 9, 5}, {5, 0, 9, 2, 8, 6, 1}}, corrupt{{1, 4, 6, 7, 0, 9, 5}, {5, 3, 9, 2, 8, 10, 1}};
const patching::Metric logit_diff{.kind = patching::Metric::Kind::logit_diff, .correct = {3, 8}, .wrong = {6, 1}};

template <class X>
double total_error(const X& a, const X& b) { return xt::sum(xt::abs(a - b))(); }

// exact (L, heads, T) at block 1, head `head`, against one forward of the corrupted run with
// `point` (blocks.1.attn.*) of that head at one position taken from the clean run.
template <class M>
void check_against_patched_forward(const M& m, const xt::xtensor<double, 3>& exact, const std::string& point, long head) {
    const double into = patching::metric(m(corrupt), logit_diff).value()();
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep, point);
    {
        const UseHooks use(keep);
        m(clean);
    }
    for (long s : {0, 3, 6}) {
        Hooks patch;
        patch.forward(point, [&](const Var<double, 4>& a) {
            return patch_at(a, cache.value<double, 4>(point), {-1, s, head, -1});
        });
        const UseHooks use(patch);
        INFO(point << " of head " << head << " at " << s);
        CHECK(exact(1, std::size_t(head), std::size_t(s)) ==
              doctest::Approx(patching::metric(m(corrupt), logit_diff).value()() - into).epsilon(1e-10));
    }
}
// What holds on any model: the query at 0 sees one key, whatever it is; some key matters.
void check_first_query(const patching::QueryKeyPatching& r) {
    CHECK(r.exact.q_head_pos(0, 0, 0) == doctest::Approx(0).scale(1));
    CHECK(std::abs(r.atp_star.q_head_pos(0, 0, 0)) < 1e-12);
    CHECK(xt::amax(xt::abs(r.exact.k_head_pos))() > 1e-3);
}
// AtP*'s error against exact patching below AtP's, for the queries and the keys.
void check_atp_star_closer(const patching::QueryKeyPatching& r, const std::string& model, double sharpness) {
    const double atp_k = total_error(r.atp.k_head_pos, r.exact.k_head_pos),
                 star_k = total_error(r.atp_star.k_head_pos, r.exact.k_head_pos);
    const double atp_q = total_error(r.atp.q_head_pos, r.exact.q_head_pos),
                 star_q = total_error(r.atp_star.q_head_pos, r.exact.q_head_pos);
    const double scale_k = xt::sum(xt::abs(r.exact.k_head_pos))(), scale_q = xt::sum(xt::abs(r.exact.q_head_pos))();
    MESSAGE(model << ", sharpness " << sharpness << ": keys, AtP error " << atp_k / scale_k << ", AtP* " << star_k / scale_k
                  << "; queries, AtP " << atp_q / scale_q << ", AtP* " << star_q / scale_q
                  << " (relative to the exact effects' sum)");
    CHECK(star_k < atp_k);
    CHECK(star_q < atp_q);
}

TEST_CASE("query and key patching: the exact sweep is one patched forward per patch") {
    const auto m = sharp_model(1.0);
    const auto r = patching::query_key_patching(m, clean, corrupt, logit_diff, 5);
    check_against_patched_forward(m, r.exact.k_head_pos, "blocks.1.attn.hook_k", 1);
    check_first_query(r);
}

TEST_CASE("query and key patching on a grouped-query Llama: rotated queries, keys per key/value head") {
    const auto m = sharp_llama(1.0);
    const auto r = patching::query_key_patching(m, clean, corrupt, logit_diff, 5);
    REQUIRE(r.exact.q_head_pos.shape() == std::array<std::size_t, 3>{2, 4, 7});
    for (const auto* e : {&r.exact, &r.atp, &r.atp_star}) {
        REQUIRE(e->k_head.shape() == std::array<std::size_t, 2>{2, 2});
        REQUIRE(e->k_head_pos.shape() == std::array<std::size_t, 3>{2, 2, 7});
    }
    check_against_patched_forward(m, r.exact.k_head_pos, "blocks.1.attn.hook_rot_k", 1);
    // the rotation is a fixed map per position: patching q before it is patching the rotated q
    check_against_patched_forward(m, r.exact.q_head_pos, "blocks.1.attn.hook_q", 3);
    check_against_patched_forward(m, r.exact.q_head_pos, "blocks.1.attn.hook_rot_q", 2);
    check_first_query(r);
}

TEST_CASE("AtP*: with sharp attention, the recomputed softmax is closer to exact patching than AtP's linearization") {
    for (double sharpness : {1.0, 4.0}) {
        check_atp_star_closer(patching::query_key_patching(sharp_model(sharpness), clean, corrupt, logit_diff), "GPT",
                              sharpness);
        check_atp_star_closer(patching::query_key_patching(sharp_llama(sharpness), clean, corrupt, logit_diff),
                              "grouped-query Llama", sharpness);
    }
}

TEST_CASE("query and key patching: every estimate as PyTorch computes it on nanoGPT's model.py, in double") {
    namespace fs = std::filesystem;
    const fs::path fixtures = XGRAD_FIXTURES;
    const auto [config, files] = cli::read_gpt_model(fixtures / "gpt" / "gpt_cli");
    const auto& model = std::get<nn::GPT<double>>(files);
    for (const std::string kind : {"logit_diff", "loss"}) {
        const fs::path in = fixtures / "patch" / kind;
        const Ids clean = cli::read_gpt_ids(in, "clean", config, false), corrupt = cli::read_gpt_ids(in, "corrupt", config, false);
        patching::Metric m;
        if (kind == "loss") {
            m.kind = patching::Metric::Kind::loss, m.targets = cli::read_gpt_ids(in, "targets", config, true);
        } else {
            const auto j = cli::parse_config_object(cli::read_config_text(in / "metric.json"), kind);
            m.correct = j.at("correct").get<std::vector<std::int64_t>>(), m.wrong = j.at("wrong").get<std::vector<std::int64_t>>();
        }
        const auto r = patching::query_key_patching(model, clean, corrupt, m);
        const testing::Fixtures torch{"patch/" + kind + "/query_key"};
        using Named = std::pair<const char*, const patching::QueryKeyEstimates*>;
        for (const auto& [method, e] : std::array<Named, 3>{{{"exact", &r.exact}, {"atp", &r.atp}, {"atp_star", &r.atp_star}}}) {
            const std::string name = std::string(method) + ".";
            double worst = 0, relative = 0;  // relative: |xgrad - torch| / |torch| where torch is not 0
            const auto check = [&](const auto& ours, const auto& ref, const std::string& estimate) {
                testing::check_parity(ours, ref, kind + " " + name + estimate, worst);
                for (std::size_t i = 0; i < ref.size(); ++i)
                    if (const double want = ref.data()[i]; want != 0)
                        relative = std::max(relative, std::abs(ours.data()[i] - want) / std::abs(want));
            };
            check(e->q_head, torch.get<2>(name + "q_head"), "q_head"), check(e->k_head, torch.get<2>(name + "k_head"), "k_head");
            check(e->q_head_pos, torch.get<3>(name + "q_head_pos"), "q_head_pos");
            check(e->k_head_pos, torch.get<3>(name + "k_head_pos"), "k_head_pos");
            MESSAGE(kind << ", " << name << "*: worst |xgrad - torch| / (1 + |torch|) " << worst << ", / |torch| " << relative);
        }
    }
}

}  // namespace test_inspect_query_key
