// Grouped-query attention: keys and values with fewer heads than the query, each serving `group`
// query heads in place (HeadLayout::group). Every attention path, the hooked one and
// scaled_dot_product_attention(..., enable_gqa) must give what the same attention gives with the
// keys and values repeated in memory (torch's definition of enable_gqa: repeat_interleave on the
// heads axis), the output and every gradient, and the same bits on 1 and 2 threads.
#include <cstdint>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

namespace test_nn_grouped_query {

namespace {

using namespace xgrad;
using nn::AttentionPath;

// (B, len, H·D) with head h a copy of head h / group of x (B, len, (H / group)·D).
xt::xtensor<double, 3> repeat_heads(const xt::xtensor<double, 3>& x, std::size_t group, std::size_t D) {
    const std::size_t B = x.shape(0), len = x.shape(1), kv_heads = x.shape(2) / D;
    xt::xtensor<double, 3> out({B, len, kv_heads * group * D});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < len; ++t)
            for (std::size_t h = 0; h < kv_heads * group; ++h)
                for (std::size_t d = 0; d < D; ++d) out(b, t, h * D + d) = x(b, t, (h / group) * D + d);
    return out;
}

// The gradient of repeated heads summed back onto the heads they repeat.
xt::xtensor<double, 3> sum_repeats(const xt::xtensor<double, 3>& g, std::size_t group, std::size_t D) {
    const std::size_t B = g.shape(0), len = g.shape(1), heads = g.shape(2) / D;
    xt::xtensor<double, 3> out = xt::zeros<double>({B, len, heads / group * D});
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < len; ++t)
            for (std::size_t h = 0; h < heads; ++h)
                for (std::size_t d = 0; d < D; ++d) out(b, t, (h / group) * D + d) += g(b, t, h * D + d);
    return out;
}

struct Result {
    xt::xtensor<double, 3> output, dq, dk, dv;
};

struct Case {
    std::size_t B, L, S, H, kv_heads, D;
};

// attend on `path` with q (B, L, H·D) and k, v (B, S, kv_heads·D) given as heads; loss Σ O ⊙ R.
// A causal mask with an offset (a cache's later queries) and a padded key of sequence 0.
Result run(const Case& c, AttentionPath path, const xt::xtensor<double, 3>& q0, const xt::xtensor<double, 3>& k0,
           const xt::xtensor<double, 3>& v0, std::size_t kv_heads) {
    using namespace nn::detail;
    const std::size_t group = c.H / kv_heads;
    auto q = parameter(q0), k = parameter(k0), v = parameter(v0);
    const auto heads = [&](const Var<double, 3>& x, std::size_t h, std::size_t serves) {
        HeadOperand<double> op{x, HeadLayout::of(x.shape(), true, h, c.D, 0)};
        op.layout.group = serves;
        return op;
    };
    const auto fill = [&](kernels::ScoreMasks<double>& m) {
        m.reset(std::array<std::size_t, 3>{c.B * c.H, c.L, c.S});
        kernels::merge_causal(m, c.S, c.S - c.L);
        double* ignore = m.for_writing(m.ignore, 1);
        for (std::size_t r = 0; r < c.H * c.L; ++r) ignore[r * c.S + 1] = 1;  // sequence 0 ignores key 1
    };
    AttendOptions o;
    o.path = path, o.causal = true;
    const std::array<std::size_t, 3> out_shape{c.B, c.L, c.H * c.D};
    const auto r = attend(heads(q, c.H, 1), heads(k, kv_heads, group), heads(v, kv_heads, group), 0.4, fill, o, out_shape);
    backward(r.context, xt::xtensor<double, 3>(randn<3>(out_shape, 7)));
    Result out{r.context.value(), q.grad(), k.grad(), v.grad()};
    tape().clear();
    return out;
}

void check_close(const xt::xtensor<double, 3>& got, const xt::xtensor<double, 3>& want, const char* what) {
    INFO(what);
    REQUIRE(got.shape() == want.shape());
    CHECK(xt::allclose(got, want, 0, 1e-12));
    CHECK(xt::amax(xt::abs(want))() > 1e-3);  // not a comparison of zeros
}

// Grouped on `path` against the same path on keys and values repeated in memory.
void check_grouped(const Case& c, AttentionPath path) {
    const std::size_t group = c.H / c.kv_heads;
    const auto q0 = randn<3>({c.B, c.L, c.H * c.D}, 1);
    const auto k0 = randn<3>({c.B, c.S, c.kv_heads * c.D}, 2), v0 = randn<3>({c.B, c.S, c.kv_heads * c.D}, 3);
    const Result grouped = run(c, path, q0, k0, v0, c.kv_heads);
    const Result repeated = run(c, path, q0, repeat_heads(k0, group, c.D), repeat_heads(v0, group, c.D), c.H);
    check_close(grouped.output, repeated.output, "output");
    check_close(grouped.dq, repeated.dq, "query grad");
    check_close(grouped.dk, sum_repeats(repeated.dk, group, c.D), "key grad");
    check_close(grouped.dv, sum_repeats(repeated.dv, group, c.D), "value grad");
}

constexpr AttentionPath every_path[] = {AttentionPath::reference, AttentionPath::weights_and_context,
                                        AttentionPath::fused, AttentionPath::memory_efficient};

}  // namespace

TEST_CASE("grouped-query attention: every path gives the result of keys and values repeated in memory") {
    for (AttentionPath path : every_path) {
        INFO("path " << nn::path_name(path));
        check_grouped({.B = 2, .L = 5, .S = 7, .H = 4, .kv_heads = 2, .D = 3}, path);  // two query heads per kv head
        check_grouped({.B = 2, .L = 5, .S = 7, .H = 4, .kv_heads = 1, .D = 3}, path);  // multi-query
        check_grouped({.B = 1, .L = 19, .S = 19, .H = 6, .kv_heads = 3, .D = 8}, path);  // past a SIMD vector
    }
}

TEST_CASE("grouped-query attention: the hooked paths, hook_k and hook_v with the key/value heads") {
    for (const char* point : {"hook_k", "hook_pattern"}) {  // hooks on q/k/v/z keep the path; scores/pattern take plain ops
        INFO(point);
        std::vector<std::array<std::size_t, 4>> k_shapes;
        Hooks hooks;
        hooks.forward("hook_k", [&](const Var<double, 4>& k, std::string_view) { k_shapes.push_back(k.shape()); });
        hooks.forward(point, [](const Var<double, 4>&, std::string_view) {});
        UseHooks use(hooks);
        check_grouped({.B = 2, .L = 5, .S = 7, .H = 4, .kv_heads = 2, .D = 3}, AttentionPath::fused);
        REQUIRE(k_shapes.size() == 2);
        CHECK(k_shapes[0] == std::array<std::size_t, 4>{2, 7, 2, 3});  // (B, S, kv heads, D), as TransformerLens
        CHECK(k_shapes[1] == std::array<std::size_t, 4>{2, 7, 4, 3});  // the repeated run's
    }
}

TEST_CASE("grouped-query attention: 2 threads give the 1-thread result exactly on every path") {
    struct Threads {  // 2 threads for this scope
        Threads() { set_num_threads(2); }
        ~Threads() { set_num_threads(1); }
    };
    const Case c{.B = 2, .L = 64, .S = 64, .H = 8, .kv_heads = 2, .D = 32};  // above parallel_min_work
    const auto q0 = randn<3>({c.B, c.L, c.H * c.D}, 1);
    const auto k0 = randn<3>({c.B, c.S, c.kv_heads * c.D}, 2), v0 = randn<3>({c.B, c.S, c.kv_heads * c.D}, 3);
    for (AttentionPath path : every_path) {
        INFO("path " << nn::path_name(path));
        const Result one = run(c, path, q0, k0, v0, c.kv_heads);
        const Result two = [&] {
            Threads two_threads;
            return run(c, path, q0, k0, v0, c.kv_heads);
        }();
        CHECK(two.output == one.output);
        CHECK(two.dq == one.dq);
        CHECK(two.dk == one.dk);
        CHECK(two.dv == one.dv);
    }
}

TEST_CASE("scaled_dot_product_attention(enable_gqa): repeat_interleave's result, without the repeat") {
    // q (N, Hq, L, E), k and v (N, Hkv, S, E or Ev); the reference: k, v repeated on the heads axis
    const auto interleave = [](const xt::xtensor<double, 4>& x, std::size_t group) {
        xt::xtensor<double, 4> out({x.shape(0), x.shape(1) * group, x.shape(2), x.shape(3)});
        for (std::size_t n = 0; n < out.shape(0); ++n)
            for (std::size_t h = 0; h < out.shape(1); ++h)
                xt::view(out, n, h) = xt::view(x, n, h / group);
        return out;
    };
    for (std::size_t Ev : {4, 3}) {  // Ev ≠ E: the plain-op reference path
        INFO("Ev " << Ev);
        const auto q0 = randn<4>({2, 6, 5, 4}, 1), k0 = randn<4>({2, 2, 7, 4}, 2), v0 = randn<4>({2, 2, 7, Ev}, 3);
        auto q = parameter(q0), k = parameter(k0), v = parameter(v0);
        const auto o = scaled_dot_product_attention(q, k, v, no_mask, 0.0, true, std::nullopt, nullptr, true);
        const xt::xtensor<double, 4> seed = randn<4>(o.shape(), 4);
        backward(o, seed);
        auto qr = parameter(q0), kr = parameter(interleave(k0, 3)), vr = parameter(interleave(v0, 3));
        const auto want = scaled_dot_product_attention(qr, kr, vr, no_mask, 0.0, true);
        backward(want, seed);
        CHECK(xt::allclose(o.value(), want.value(), 0, 1e-12));
        CHECK(xt::allclose(q.grad(), qr.grad(), 0, 1e-12));
        for (std::size_t h = 0; h < 2; ++h) {  // a kv head's gradient: the sum over the 3 query heads it serves
            const xt::xtensor<double, 4> dk = xt::view(kr.grad(), xt::all(), xt::range(3 * h, 3 * h + 3)),
                                         dv = xt::view(vr.grad(), xt::all(), xt::range(3 * h, 3 * h + 3));
            CHECK(xt::allclose(xt::view(k.grad(), xt::all(), h), xt::sum(dk, {1}), 0, 1e-12));
            CHECK(xt::allclose(xt::view(v.grad(), xt::all(), h), xt::sum(dv, {1}), 0, 1e-12));
        }
        CHECK(xt::amax(xt::abs(k.grad()))() > 1e-3);
    }
}

TEST_CASE("scaled_dot_product_attention(enable_gqa): heads that do not divide, or no heads axis, are errors") {
    const auto q = parameter(randn<4>({2, 6, 5, 4}, 1));
    const auto k4 = parameter(randn<4>({2, 4, 7, 4}, 2)), v4 = parameter(randn<4>({2, 4, 7, 4}, 3));
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k4, v4, no_mask, 0.0, false, std::nullopt, nullptr, true),
                         doctest::Contains("enable_gqa needs k and v with the same number of heads, dividing q's"),
                         shape_error);
    const auto k2 = parameter(randn<4>({2, 2, 7, 4}, 2)), v2 = parameter(randn<4>({2, 2, 7, 4}, 3));
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k2, v2),  // without enable_gqa: the same heads
                         doctest::Contains("need the same leading dims: q (2, 6, 5, 4), k (2, 2, 7, 4)"), shape_error);
    const auto k3 = parameter(randn<4>({1, 2, 7, 4}, 2)), v3 = parameter(randn<4>({1, 2, 7, 4}, 3));
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k3, v3, no_mask, 0.0, false, std::nullopt, nullptr, true),
                         doctest::Contains("same leading dims but the heads (-3)"), shape_error);
    const auto q2 = parameter(randn<2>({5, 4}, 1)), kv2 = parameter(randn<2>({7, 4}, 2));
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q2, kv2, kv2, no_mask, 0.0, false, std::nullopt, nullptr, true),
                         doctest::Contains("enable_gqa needs a heads axis"), shape_error);
}

}  // namespace test_nn_grouped_query
