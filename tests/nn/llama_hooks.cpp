// nn::Llama's hook points (docs/hooks.md): their names and shapes on a grouped-query model, their
// values recomputed from each other (the rotary embedding, the scores from the rotated queries and
// keys, each query head reading its group's values, the SwiGLU, the RMSNorm, the residual sums),
// and backward hooks against finite differences taken by forward hooks.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/check/random.hpp"
#include "xgrad/core/hooks.hpp"
#include "xgrad/nn/llama.hpp"
#include "../support/hook_checks.hpp"

namespace test_nn_llama_hooks {

using namespace xgrad;
using Ids = xt::xtensor<std::int64_t, 2>;

// 2 layers, dim 16, 4 query heads over 2 key/value heads of 4, a hidden size of 12.
nn::Llama<double> small_llama(std::uint64_t seed) {
    Generator gen(seed);
    nn::Llama<double> m(nn::LlamaConfig{.dim = 16, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2, .vocab_size = 11,
                                        .hidden_dim = 12, .max_seq_len = 6, .tie_embeddings = false},
                        gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.5, gen); });
    set_training(m, false);
    return m;
}
const Ids idx{{1, 4, 2, 7, 3}, {5, 0, 9, 2, 2}}, targets{{4, 2, 7, 3, 1}, {0, 9, 2, 2, 6}};
constexpr std::size_t B = 2, T = 5, H = 4, Hkv = 2, D = 4, group = H / Hkv;

TEST_CASE("hooks: nn::Llama's points under TransformerLens's names, their values recomputed from each other") {
    const auto m = small_llama(3);
    ActivationCache cache;
    Hooks hooks;
    cache.attach(hooks);
    const UseHooks use(hooks);
    const double loss = m.loss(idx, targets).value()();
    std::vector<std::string> want{"hook_embed"};
    for (const std::string l : {"0", "1"})
        for (const char* p : {"hook_resid_pre", "attn.hook_q", "attn.hook_rot_q", "attn.hook_k", "attn.hook_rot_k",
                              "attn.hook_v", "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "hook_attn_out",
                              "hook_resid_mid", "mlp.hook_pre", "mlp.hook_pre_linear", "mlp.hook_post", "hook_mlp_out",
                              "hook_resid_post"})
            want.push_back("blocks." + l + "." + p);
    want.push_back("ln_final.hook_normalized");
    CHECK(cache.names() == want);
    xgrad::testing::check_residual_sums(cache, 2);
    CHECK(xt::allclose(cache.value<double, 3>("blocks.0.hook_resid_pre"), cache.value<double, 3>("hook_embed")));

    for (const std::string b : {"blocks.0.", "blocks.1."}) {
        INFO(b);
        const auto value = [&](const char* p) { return cache.value<double, 4>(b + p); };
        const auto &q = value("attn.hook_q"), &rot_q = value("attn.hook_rot_q"), &k = value("attn.hook_k");
        const auto &rot_k = value("attn.hook_rot_k"), &v = value("attn.hook_v"), &z = value("attn.hook_z");
        const auto &scores = value("attn.hook_attn_scores"), &pattern = value("attn.hook_pattern");
        REQUIRE(q.shape() == std::array<std::size_t, 4>{B, T, H, D});
        REQUIRE(k.shape() == std::array<std::size_t, 4>{B, T, Hkv, D});
        REQUIRE(v.shape() == k.shape());
        REQUIRE(rot_k.shape() == k.shape());
        REQUIRE(pattern.shape() == std::array<std::size_t, 4>{B, H, T, T});
        // the rotary embedding turns each pair (2i, 2i+1) by an angle of the position: none at 0,
        // the pair's length kept, and something turned at the other positions
        CHECK(xt::allclose(xt::view(rot_q, xt::all(), 0), xt::view(q, xt::all(), 0), 1e-14, 1e-14));
        CHECK(xt::allclose(xt::view(rot_k, xt::all(), 0), xt::view(k, xt::all(), 0), 1e-14, 1e-14));
        const auto pair_lengths = [](const xt::xtensor<double, 4>& a) {
            return xt::eval(xt::sqrt(xt::square(xt::view(a, xt::all(), xt::all(), xt::all(), xt::range(0, D, 2))) +
                                     xt::square(xt::view(a, xt::all(), xt::all(), xt::all(), xt::range(1, D, 2)))));
        };
        CHECK(xt::allclose(pair_lengths(rot_q), pair_lengths(q), 1e-12, 1e-12));
        CHECK(xt::allclose(pair_lengths(rot_k), pair_lengths(k), 1e-12, 1e-12));
        CHECK(xt::amax(xt::abs(rot_q - q))() > 1e-2);
        for (std::size_t n = 0; n < B; ++n)
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t i = 0; i < T; ++i) {
                    double row_sum = 0;
                    for (std::size_t j = 0; j < T; ++j) {
                        if (j > i) {  // causal
                            CHECK(scores(n, h, i, j) == -INFINITY);
                            CHECK(pattern(n, h, i, j) == 0.0);
                            continue;
                        }
                        // head h reads key/value head h / group, after the rotary embedding
                        double s = 0;
                        for (std::size_t d = 0; d < D; ++d) s += rot_q(n, i, h, d) * rot_k(n, j, h / group, d);
                        CHECK(scores(n, h, i, j) == doctest::Approx(s / std::sqrt(double(D))).epsilon(1e-12));
                        row_sum += pattern(n, h, i, j);
                    }
                    CHECK(row_sum == doctest::Approx(1.0).epsilon(1e-12));
                    for (std::size_t d = 0; d < D; ++d) {  // z = pattern · v of the group's value head
                        double o = 0;
                        for (std::size_t j = 0; j <= i; ++j) o += pattern(n, h, i, j) * v(n, j, h / group, d);
                        CHECK(z(n, i, h, d) == doctest::Approx(o).epsilon(1e-12));
                    }
                }
        // SwiGLU: hook_post = silu(hook_pre) ⊙ hook_pre_linear, (B, T, hidden)
        const auto& pre = cache.value<double, 3>(b + "mlp.hook_pre");
        const auto& post = cache.value<double, 3>(b + "mlp.hook_post");
        REQUIRE(post.shape() == std::array<std::size_t, 3>{B, T, 12});
        CHECK(xt::allclose(post, pre / (1.0 + xt::exp(-pre)) * cache.value<double, 3>(b + "mlp.hook_pre_linear"), 1e-12, 1e-12));
    }
    // the final RMSNorm: x / √(mean(x²) + eps) · weight
    const auto& last = cache.value<double, 3>("blocks.1.hook_resid_post");
    const xt::xtensor<double, 3> rms = xt::sqrt(xt::mean(xt::square(last), {2}, xt::keep_dims) + m.config.norm_eps);
    CHECK(xt::allclose(cache.value<double, 3>("ln_final.hook_normalized"), last / rms * m.norm.weight.value(), 1e-12, 1e-12));
    // the hooks (the reference path for the pattern) change no value
    Hooks none;
    const UseHooks use_none(none);
    CHECK(std::abs(m.loss(idx, targets).value()() - loss) < 1e-12);
}

TEST_CASE("hooks: nn::Llama's backward hooks give dL/d(point) as finite differences do") {
    const auto m = small_llama(5);
    xgrad::testing::check_point_gradients({"blocks.0.attn.hook_rot_k", "blocks.1.attn.hook_q", "blocks.0.attn.hook_v",
                                           "blocks.1.attn.hook_pattern", "blocks.0.attn.hook_attn_scores",
                                           "blocks.1.attn.hook_z", "blocks.0.mlp.hook_pre", "blocks.1.mlp.hook_post",
                                           "blocks.0.hook_resid_mid", "ln_final.hook_normalized"},
                                          [&] { return m.loss(idx, targets); });
}

}  // namespace test_nn_llama_hooks
