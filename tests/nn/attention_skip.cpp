// Keys that every query of a head ignores are skipped by the attention (nn/attention/weights_context.hpp, fused.hpp,
// memory_efficient.hpp):
// which keys count as live, and that skipping them changes nothing but NaN propagation. The oracle
// is the same mask given as a float mask (-inf where ignored), which is never skipped.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_attention_skip {

namespace {

using namespace xgrad;
using Mha = nn::MultiheadAttention<double>;
constexpr double inf = std::numeric_limits<double>::infinity();
constexpr std::size_t N = 3, L = 5, S = 9, E = 8, H = 2;

// ignore[r] is the ignore mask of score row r (one head of L rows per (N·H) index), stored per row.
kernels::KeyRange live_of(const std::vector<std::vector<int>>& ignore, std::size_t first, std::size_t count) {
    kernels::ScoreMasks<double> masks;
    masks.reset(std::array<std::size_t, 3>{ignore.size() / L, L, S});
    double* stored = masks.for_writing(masks.ignore, 1);
    for (std::size_t r = 0; r < ignore.size(); ++r)
        for (std::size_t j = 0; j < S; ++j) stored[r * S + j] = ignore[r][j];
    return masks.live_keys(first, count);
}

// masks.live_keys against live_of the same mask stored row by row (`ignore`), for every run of
// rows, within a head and across heads.
void check_live_keys(const kernels::ScoreMasks<double>& masks, const std::vector<std::vector<int>>& ignore) {
    for (std::size_t first = 0; first < ignore.size(); ++first)
        for (std::size_t count = 1; first + count <= ignore.size(); ++count) {
            INFO("rows " << first << " + " << count);
            const kernels::KeyRange want = live_of(ignore, first, count), got = masks.live_keys(first, count);
            CHECK(got.begin == want.begin);
            CHECK(got.end == want.end);
            CHECK(got.holes == want.holes);
        }
}

Var<double, 1> flat3(const Var<double, 3>& v) { return reshape<1>(v, {-1}); }

struct Run {
    xt::xtensor<double, 3> output, query_grad, key_grad, value_grad;
    xt::xtensor<double, 4> weights;
    xt::xtensor<double, 2> in_proj_grad, out_proj_grad;
};

// Output and per-head weights of self-attention-like inputs, and every gradient of
// Σ output ⊙ R1 + Σ weights ⊙ R2 (so the weights have a consumer of their own).
Run run(Mha& m, const nn::MhaForwardOptions<double>& fo, const xt::xtensor<double, 3>& v_in) {
    const auto q = parameter(xt::xtensor<double, 3>(randn<3>({L, N, E}, 1)));
    const auto k = parameter(xt::xtensor<double, 3>(randn<3>({S, N, E}, 2)));
    const auto v = parameter(v_in);
    zero_grad(m);
    const auto r = m.forward(q, k, v, fo);
    const Var<double, 1> both = concat(std::vector<Var<double, 1>>{flat3(r.output), reshape<1>(r.attn_weights_per_head, {-1})}, 0);
    backward(both, xt::xtensor<double, 1>(randn<1>({both.size()}, 3)));
    return {r.output.value(), q.grad(), k.grad(), v.grad(), r.attn_weights_per_head.value(),
            m.in_proj_weight.grad(), m.out_proj.weight.grad()};
}

template <class A, class B>
void check_same(const A& skipped, const B& reference, const char* what) {
    INFO(what);
    REQUIRE(skipped.size() == reference.size());
    for (std::size_t i = 0; i < reference.size(); ++i) {
        const double a = skipped.data()[i], b = reference.data()[i];
        if (!(std::abs(a - b) <= 1e-12 * (1 + std::abs(b)))) FAIL_CHECK("element " << i << ": " << a << " vs " << b);
    }
}

}  // namespace

TEST_CASE("ScoreMasks::live_keys: from the first key some query keeps to the last") {
    using R = std::vector<int>;
    const R all(S, 1), none(S, 0);
    const R padded{1, 1, 0, 0, 0, 1, 0, 1, 1};  // keys 2..6 (5 ignored inside: still live)
    std::vector<std::vector<int>> rows(2 * L, padded);
    auto live = live_of(rows, 0, L);
    CHECK(live.begin == 2);
    CHECK(live.end == 7);
    CHECK(live.holes);
    rows[L + 1] = R{1, 0, 1, 1, 1, 1, 1, 1, 1}, rows[L + 3] = R{1, 1, 1, 1, 1, 1, 1, 1, 0};  // the union over rows
    live = live_of(rows, L, L);
    CHECK(live.begin == 1);
    CHECK(live.end == S);
    CHECK(live.holes);
    std::vector<std::vector<int>> padded_ends(L, R{1, 0, 0, 0, 0, 0, 0, 1, 1});  // a contiguous range
    live = live_of(padded_ends, 0, L);
    CHECK(live.begin == 1);
    CHECK(live.end == 7);
    CHECK_FALSE(live.holes);
    padded_ends[L - 1][4] = 1;  // one key inside, ignored by the last row only
    CHECK(live_of(padded_ends, 0, L).holes);
    std::vector<std::vector<int>> causal(L, none);  // query i keeps keys 0..i (+ 4: S > L)
    for (std::size_t i = 0; i < L; ++i) std::fill(causal[i].begin() + i + 5, causal[i].end(), 1);
    live = live_of(causal, 0, L);
    CHECK(live.begin == 0);
    CHECK(live.end == S);
    CHECK(live.holes);
    std::vector<std::vector<int>> ignored(L, all);  // every key of every query: empty
    CHECK(live_of(ignored, 0, L).size() == 0);
    kernels::ScoreMasks<double> no_ignore;  // no ignore mask at all: every key
    no_ignore.reset(std::array<std::size_t, 3>{1, L, S});
    CHECK(no_ignore.live_keys(0, L).size() == S);
}

TEST_CASE("ScoreMasks: a causal mask is kept as a rule, its rows and live keys those of the stored mask") {
    constexpr std::size_t heads = 2, offset = 3;  // query i keeps keys 0..i + 3
    kernels::ScoreMasks<double> rule;
    rule.reset(std::array<std::size_t, 3>{heads, L, S});
    kernels::merge_causal(rule, S, offset);
    REQUIRE(rule.causal.used);
    CHECK_FALSE(rule.ignore.used);  // nothing of rows × S stored
    std::vector<std::vector<int>> stored(heads * L, std::vector<int>(S, 0));
    for (std::size_t r = 0; r < heads * L; ++r)
        for (std::size_t j = 0; j < S; ++j) {
            stored[r][j] = j > r % L + offset;
            CHECK(rule.ignores_key(r, j) == bool(stored[r][j]));
        }
    check_live_keys(rule, stored);
    // merged with a stored ignore mask (a key padding: one row per head here), the rule stays a rule
    // and the rows stay one per head: the union, in O(rows / L · S)
    for (const bool rule_first : {true, false}) {
        INFO("the causal rule merged " << (rule_first ? "first" : "second"));
        kernels::ScoreMasks<double> both;
        both.reset(std::array<std::size_t, 3>{heads, L, S});
        if (rule_first) kernels::merge_causal(both, S, offset);
        double* padding = both.for_writing(both.ignore, L);
        padding[0] = padding[S + 7] = 1;  // key 0 of the first head, key 7 of the second
        if (!rule_first) kernels::merge_causal(both, S, offset);
        CHECK(both.causal.used);
        CHECK(both.ignore.stored.size() == heads * S);
        std::vector<std::vector<int>> merged = stored;
        for (std::size_t r = 0; r < heads * L; ++r) {
            merged[r][r < L ? 0 : 7] = 1;
            for (std::size_t j = 0; j < S; ++j) CHECK(both.ignores_key(r, j) == bool(merged[r][j]));
        }
        check_live_keys(both, merged);
    }
}

TEST_CASE("MultiheadAttention: keys every query ignores are skipped, with the results of the -inf mask") {
    Generator g(3);
    Mha m({.embed_dim = E, .num_heads = H}, g);
    m.in_proj_bias.value() = randn<1>({3 * E}, 4);  // torch zeroes them; nonzero exercises more
    // sequence 0: 2 keys padded in front, 3 at the end; 1: key 4, inside (the mask applied within the
    // range); 2: every key (a fully masked head)
    xt::xarray<bool> padding = xt::zeros<bool>({N, S});
    for (std::size_t j : {0, 1, 6, 7, 8}) padding(0, j) = true;
    padding(1, 4) = true;
    for (std::size_t j = 0; j < S; ++j) padding(2, j) = true;
    xt::xarray<double> as_float = xt::where(padding, -inf, 0.0);
    nn::MhaForwardOptions<double> skipped, reference;
    skipped.key_padding_mask = ignore_mask(padding), reference.key_padding_mask = additive_mask(as_float);
    skipped.average_attn_weights = reference.average_attn_weights = false;
    const xt::xtensor<double, 3> values = randn<3>({S, N, E}, 5);
    const Run a = run(m, skipped, values), b = run(m, reference, values);
    check_same(a.output, b.output, "output");
    check_same(a.weights, b.weights, "weights");
    check_same(a.query_grad, b.query_grad, "query grad");
    check_same(a.key_grad, b.key_grad, "key grad");
    check_same(a.value_grad, b.value_grad, "value grad");
    check_same(a.in_proj_grad, b.in_proj_grad, "in_proj_weight grad");
    check_same(a.out_proj_grad, b.out_proj_grad, "out_proj.weight grad");
    // the skipped keys have weight exactly 0, and the gradients reach the live ones
    CHECK(a.weights(0, 0, 0, 1) == 0.0);
    CHECK(a.weights(0, 1, 4, 6) == 0.0);
    CHECK(a.weights(2, 1, 3, 4) == 0.0);
    CHECK(a.weights(1, 0, 2, 4) == 0.0);
    CHECK(a.weights(1, 0, 2, 5) > 0.0);
    CHECK(a.key_grad(3, 0, 0) != 0.0);
    CHECK(a.value_grad(2, 0, 1) != 0.0);
    CHECK(a.value_grad(8, 0, 1) == 0.0);

    // a NaN in a padded key's value: skipped, it reaches neither the output nor the gradients of the
    // query, key and value (torch's would be NaN); in_proj_weight's gradient multiplies it by 0: NaN in both
    xt::xtensor<double, 3> poisoned = values;
    for (std::size_t e = 0; e < E; ++e) poisoned(7, 0, e) = std::numeric_limits<double>::quiet_NaN();
    poisoned(0, 2, 3) = inf;  // sequence 2 ignores every key
    const Run c = run(m, skipped, poisoned);
    check_same(c.output, a.output, "output with NaN and inf in padded values");
    check_same(c.query_grad, a.query_grad, "query grad with NaN and inf in padded values");
    check_same(c.key_grad, a.key_grad, "key grad with NaN and inf in padded values");
    check_same(c.value_grad, a.value_grad, "value grad with NaN and inf in padded values");
}

TEST_CASE("MultiheadAttention: is_causal with a key_padding_mask, on every path, equals their union as a float mask") {
    constexpr std::size_t T_ = 6;  // queries = keys
    Generator g(8);
    Mha m({.embed_dim = E, .num_heads = H}, g);
    // sequence 0: keys 1 and 3 padded; 1: key 5; 2: none (no query ignores every key: torch gives NaN there)
    xt::xarray<bool> padding = xt::zeros<bool>({N, T_});
    padding(0, 1) = padding(0, 3) = padding(1, 5) = true;
    xt::xarray<double> union_mask = xt::zeros<double>({N * H, T_, T_});  // (N·H, L, S), -inf where ignored
    for (std::size_t b = 0; b < N; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t i = 0; i < T_; ++i)
                for (std::size_t j = 0; j < T_; ++j)
                    if (j > i || padding(b, j)) union_mask(b * H + h, i, j) = -inf;
    const auto x = parameter(xt::xtensor<double, 3>(randn<3>({T_, N, E}, 9)));
    const xt::xtensor<double, 3> seed = randn<3>({T_, N, E}, 10);
    const auto outputs = [&](nn::MhaForwardOptions<double> fo) {
        zero_grad(m);
        x.zero_grad();
        const auto r = m.forward(x, x, x, fo);
        backward(r.output, seed);
        return std::array<xt::xtensor<double, 3>, 2>{r.output.value(), x.grad()};
    };
    nn::MhaForwardOptions<double> oracle;
    oracle.attn_mask = additive_mask(union_mask), oracle.path = nn::AttentionPath::reference, oracle.need_weights = false;
    const auto want = outputs(oracle);
    CHECK(want[0](0, 1, 0) != 0.0);  // sequence 1 attends
    for (const auto path : {nn::AttentionPath::reference, nn::AttentionPath::weights_and_context, nn::AttentionPath::fused,
                            nn::AttentionPath::memory_efficient}) {
        INFO("path " << int(path));
        nn::MhaForwardOptions<double> fo;
        fo.is_causal = true, fo.key_padding_mask = ignore_mask(padding), fo.path = path;
        fo.need_weights = path == nn::AttentionPath::weights_and_context;
        const auto got = outputs(fo);
        check_same(got[0], want[0], "output");
        check_same(got[1], want[1], "input grad");
    }
}

}  // namespace test_nn_attention_skip
