// The attention paths (nn/attention/paths.hpp): the fused op and the two ops (weights, context)
// must give what the reference composition of plain ops gives, the output and every gradient, on
// every mask kind, with dropout, and on lengths that cross SIMD vectors and the softmax's chunks
// of columns; the fused op's study internals must be those of the weights op; and its result
// must not depend on the thread count. The module's gradchecks: checks/attention_flags.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_attention_paths {

namespace {

using namespace xgrad;

struct Shape {
    std::size_t N, L, S, E, H;
};

enum class Masks { none, kpm_bool, kpm_float, attn2_bool, attn3_float, causal, valid_lens, causal_kpm };

template <Real T>
struct Run {
    xt::xtensor<T, 3> output, query_grad, key_grad, value_grad;
    xt::xtensor<T, 2> in_proj_grad, out_proj_grad;
    xt::xtensor<T, 1> in_proj_bias_grad;
};

// Output of MHA on random query, key and value, and every gradient of Σ output ⊙ R.
template <Real T>
Run<T> run(nn::MultiheadAttention<T>& m, const Shape& s, bool batch_first, const nn::MhaForwardOptions<T>& fo,
           const xt::xtensor<T, 3>& values) {
    auto shape = [&](std::size_t len) {
        return batch_first ? std::array<std::size_t, 3>{s.N, len, s.E} : std::array<std::size_t, 3>{len, s.N, s.E};
    };
    const auto q = parameter(xt::xtensor<T, 3>(randn<3>(shape(s.L), 1)));
    const auto k = parameter(xt::xtensor<T, 3>(randn<3>(shape(s.S), 2)));
    const auto v = parameter(values);
    zero_grad(m);
    const auto r = m.forward(q, k, v, fo);
    backward(r.output, xt::xtensor<T, 3>(randn<3>(shape(s.L), 3)));
    return {r.output.value(), q.grad(), k.grad(), v.grad(), m.in_proj_weight.grad(), m.out_proj.weight.grad(),
            m.in_proj_bias.grad()};
}

template <class A, class B>
void check_close(const A& got, const B& want, double tolerance, const char* what) {
    INFO(what);
    REQUIRE(got.size() == want.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double a = double(got.data()[i]), b = double(want.data()[i]);
        if (a == b || (std::isnan(a) && std::isnan(b))) continue;  // equal infinities too
        if (!(std::abs(a - b) <= tolerance * (1 + std::abs(b))) && bad++ < 3)
            FAIL_CHECK(std::string(what) << " element " << i << ": " << a << " vs " << b);
    }
    CHECK(bad == 0);
}

template <Real T>
void check_runs(const Run<T>& fused, const Run<T>& reference, double tolerance) {
    check_close(fused.output, reference.output, tolerance, "output");
    check_close(fused.query_grad, reference.query_grad, tolerance, "query grad");
    check_close(fused.key_grad, reference.key_grad, tolerance, "key grad");
    check_close(fused.value_grad, reference.value_grad, tolerance, "value grad");
    check_close(fused.in_proj_grad, reference.in_proj_grad, tolerance, "in_proj_weight grad");
    check_close(fused.in_proj_bias_grad, reference.in_proj_bias_grad, tolerance, "in_proj_bias grad");
    check_close(fused.out_proj_grad, reference.out_proj_grad, tolerance, "out_proj.weight grad");
    // the comparison means something only if the gradients are not all 0
    CHECK(xt::amax(xt::abs(fused.key_grad))() > 0);
    CHECK(xt::amax(xt::abs(fused.value_grad))() > 0);
}

// The masks of one kind. kpm_bool pads sequence 0 in front and at the end and one key inside
// sequence 1, and the last sequence wholly; attn2_bool ignores every key of query 1 (if any).
template <Real T>
nn::MhaForwardOptions<T> make_masks(Masks kind, const Shape& s, unsigned seed) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> normal;
    nn::MhaForwardOptions<T> fo;
    switch (kind) {
        case Masks::none: break;
        case Masks::kpm_bool: {
            xt::xarray<bool> pad = xt::zeros<bool>({s.N, s.S});
            pad(0, 0) = pad(0, 1) = pad(0, s.S - 1) = true;
            pad(1, s.S / 2) = true;
            for (std::size_t j = 0; j < s.S; ++j) pad(s.N - 1, j) = true;
            fo.key_padding_mask = ignore_mask(pad);
            break;
        }
        case Masks::kpm_float: {
            xt::xarray<T> add = xt::zeros<T>({s.N, s.S});
            for (auto& x : add) x = rng() % 100 < 20 ? -inf : T(normal(rng));
            fo.key_padding_mask = additive_mask(add);
            break;
        }
        case Masks::attn2_bool: {
            xt::xarray<bool> ignore = xt::zeros<bool>({s.L, s.S});
            for (auto& x : ignore) x = rng() % 100 < 35;
            if (s.L > 1)
                for (std::size_t j = 0; j < s.S; ++j) ignore(1, j) = true;
            fo.attn_mask = ignore_mask(ignore);
            break;
        }
        case Masks::attn3_float: {
            xt::xarray<T> add = xt::zeros<T>({s.N * s.H, s.L, s.S});
            for (auto& x : add) x = rng() % 100 < 20 ? -inf : T(normal(rng));
            fo.attn_mask = additive_mask(add);
            break;
        }
        case Masks::causal: fo.is_causal = true; break;
        case Masks::causal_kpm: {  // the causal rule beside stored key-padding rows
            fo = make_masks<T>(Masks::kpm_bool, s, seed);
            fo.is_causal = true;
            break;
        }
        case Masks::valid_lens: {
            xt::xtensor<std::int64_t, 2> lens = xt::zeros<std::int64_t>({s.N, s.L});
            for (auto& x : lens) x = std::int64_t(rng() % (s.S + 1));
            fo.valid_lens = valid_lens(lens);
            break;
        }
    }
    return fo;
}

template <Real T>
nn::MultiheadAttention<T> make_module(const Shape& s, bool batch_first, bool extra_keys, double dropout = 0) {
    Generator g(5);
    nn::MultiheadAttention<T> m({.embed_dim = s.E, .num_heads = s.H, .dropout = dropout, .add_bias_kv = extra_keys,
                                 .add_zero_attn = extra_keys, .batch_first = batch_first},
                                g);
    m.in_proj_bias.value() = xt::xtensor<T, 1>(randn<1>({3 * s.E}, 4));  // torch zeroes them
    return m;
}

// The fast paths against the reference, for every mask kind on shape s: the fused op (no
// need_weights), the memory-efficient op, the two ops (need_weights; the loss does not read the
// weights), and with dropout the two ops against the reference drawing the same dropout mask.
template <Real T>
void check_paths_against_reference(const Shape& s, double tolerance) {
    unsigned seed = 10;
    for (bool batch_first : {false, true})
        for (bool extra_keys : {false, true})
            for (Masks kind : {Masks::none, Masks::kpm_bool, Masks::kpm_float, Masks::attn2_bool, Masks::attn3_float,
                               Masks::causal, Masks::valid_lens, Masks::causal_kpm}) {
                if ((kind == Masks::causal || kind == Masks::causal_kpm) && s.L != s.S) continue;  // a square mask
                INFO("L=" << s.L << " S=" << s.S << " E=" << s.E << " H=" << s.H << " batch_first=" << batch_first
                          << " extra_keys=" << extra_keys << " masks=" << int(kind));
                const auto values_shape = batch_first ? std::array<std::size_t, 3>{s.N, s.S, s.E}
                                                      : std::array<std::size_t, 3>{s.S, s.N, s.E};
                const xt::xtensor<T, 3> values = randn<3>(values_shape, 6);
                const nn::MhaForwardOptions<T> masks = make_masks<T>(kind, s, seed++);
                const auto on_path = [&](nn::AttentionPath path, bool need_weights) {
                    nn::MhaForwardOptions<T> fo = masks;
                    fo.path = path, fo.need_weights = need_weights;
                    return fo;
                };
                auto m = make_module<T>(s, batch_first, extra_keys);
                const Run<T> reference = run(m, s, batch_first, on_path(nn::AttentionPath::reference, false), values);
                check_runs(run(m, s, batch_first, on_path(nn::AttentionPath::automatic, false), values), reference, tolerance);
                check_runs(run(m, s, batch_first, on_path(nn::AttentionPath::memory_efficient, false), values), reference,
                           tolerance);
                check_runs(run(m, s, batch_first, on_path(nn::AttentionPath::automatic, true), values), reference, tolerance);
                auto dropping = make_module<T>(s, batch_first, extra_keys, 0.3);
                Generator& gen = *dropping.dropout_generator;
                gen.manual_seed(7);
                const Run<T> reference_dropped =
                    run(dropping, s, batch_first, on_path(nn::AttentionPath::reference, true), values);
                gen = Generator(7);
                check_runs(run(dropping, s, batch_first, on_path(nn::AttentionPath::automatic, true), values),
                           reference_dropped, tolerance);
            }
}

}  // namespace

TEST_CASE("attention paths: fused and two ops give the reference's output and every gradient, each mask kind (double)") {
    // double has 8 lanes with AVX-512: L = 5 one partial vector, 19 three, 33 five (a chunk of 4 and 1)
    check_paths_against_reference<double>({3, 5, 9, 8, 2}, 1e-12);
    check_paths_against_reference<double>({3, 19, 12, 12, 3}, 1e-12);
    check_paths_against_reference<double>({3, 33, 33, 16, 2}, 1e-12);
    // one query (a decoding step: its scores one column of dot products, P·V one row), and heads
    // of size 1 (every product with one column, accumulating into dV and dK)
    check_paths_against_reference<double>({3, 1, 9, 24, 2}, 1e-12);
    check_paths_against_reference<double>({2, 5, 7, 3, 3}, 1e-12);
}

TEST_CASE("attention paths: the reference's results in float32, lengths past one 16-lane vector") {
    check_paths_against_reference<float>({3, 70, 24, 32, 2}, 2e-5);
    check_paths_against_reference<float>({4, 17, 17, 8, 4}, 2e-5);
}

TEST_CASE("attention paths: long sequences, where the memory-efficient op splits the queries into blocks") {
    // block_rows_for: 128 rows for S = 300: 3 blocks, the last partial
    CHECK(nn::detail::block_rows_for<double>(300) == 128);
    check_paths_against_reference<double>({2, 300, 300, 8, 2}, 1e-12);
    // the projections' weight gradients sum N·L = 600 products in float: 1e-4 of their size
    check_paths_against_reference<float>({2, 300, 300, 8, 2}, 1e-4);
}

TEST_CASE("attention paths: automatic takes memory_efficient for long causal attention and for a large state") {
    using nn::AttentionPath;
    using nn::detail::choose_path;
    // causal: from L·S = 512² per head (where its skipping outruns the fused path)
    CHECK(choose_path(AttentionPath::automatic, {.heads = 12, .queries = 511, .keys = 512, .causal = true}) ==
          AttentionPath::fused);
    CHECK(choose_path(AttentionPath::automatic, {.heads = 12, .queries = 512, .keys = 512, .causal = true}) ==
          AttentionPath::memory_efficient);
    // otherwise the fused path, until its kept weights B·H·L·S reach 2^26 scores
    CHECK(choose_path(AttentionPath::automatic, {.heads = 16, .queries = 1024, .keys = 1024}) == AttentionPath::fused);
    CHECK(choose_path(AttentionPath::automatic, {.heads = 64, .queries = 1024, .keys = 1024}) ==
          AttentionPath::memory_efficient);
    // weights that leave the op: the two ops, whatever the length
    CHECK(choose_path(AttentionPath::automatic, {.need_weights = true, .heads = 64, .queries = 4096, .keys = 4096,
                                                 .causal = true}) == AttentionPath::weights_and_context);
    CHECK_THROWS_WITH_AS(choose_path(AttentionPath::memory_efficient, {.dropout = true}),
                         doctest::Contains("memory_efficient path keeps the weights inside; it cannot run with dropout"),
                         value_error);
}

TEST_CASE("attention paths: the fused path refuses need_weights and dropout, naming them") {
    const Shape s{2, 3, 3, 4, 2};
    auto m = make_module<double>(s, false, false);
    const auto x = parameter(xt::xtensor<double, 3>(randn<3>({s.L, s.N, s.E}, 1)));
    nn::MhaForwardOptions<double> fo;
    fo.path = nn::AttentionPath::fused;
    CHECK_THROWS_WITH_AS(m.forward(x, x, x, fo), doctest::Contains("fused path keeps the weights inside; it cannot run with need_weights"),
                         value_error);
}

TEST_CASE("one-op attention (fused, memory_efficient): a NaN in a padded key's value reaches neither output nor gradients") {
    for (nn::AttentionPath path : {nn::AttentionPath::fused, nn::AttentionPath::memory_efficient}) {
        INFO("path " << int(path));
        const Shape s{3, 5, 9, 8, 2};
        auto m = make_module<double>(s, false, false);
        auto fo = make_masks<double>(Masks::kpm_bool, s, 1);  // sequence 0 pads keys 0, 1 and 8
        fo.need_weights = false, fo.path = path;
        xt::xtensor<double, 3> values = randn<3>({s.S, s.N, s.E}, 6);
        const Run<double> clean = run(m, s, false, fo, values);
        for (std::size_t e = 0; e < s.E; ++e) values(8, 0, e) = std::numeric_limits<double>::quiet_NaN();
        const Run<double> poisoned = run(m, s, false, fo, values);
        check_close(poisoned.output, clean.output, 0, "output");
        check_close(poisoned.query_grad, clean.query_grad, 0, "query grad");
        check_close(poisoned.key_grad, clean.key_grad, 0, "key grad");
        check_close(poisoned.value_grad, clean.value_grad, 0, "value grad");
        // the last sequence ignores every key: zero output before out_proj, no gradient to its query
        for (std::size_t i = 0; i < s.L; ++i)
            for (std::size_t e = 0; e < s.E; ++e) CHECK(clean.query_grad(i, s.N - 1, e) == 0.0);
    }
}

// The one-op path `path` (memory_efficient in blocks of 4 queries) against the two ops, on masks
// merged by fill: output, gradients, and its study internals (the weights op's scores and weights,
// with gradients).
template <class Fill>
void check_one_op_against_two_ops(nn::AttentionPath path, const Fill& fill) {
    using namespace nn::detail;
    constexpr std::size_t N = 2, L = 10, S = 11, E = 8, H = 2, D = E / H;
    const auto q = parameter(xt::xtensor<double, 3>(randn<3>({L, N, E}, 1)));
    const auto k = parameter(xt::xtensor<double, 3>(randn<3>({S, N, E}, 2)));
    const auto v = parameter(xt::xtensor<double, 3>(randn<3>({S, N, E}, 3)));
    const auto heads = [](const Var<double, 3>& x) { return HeadOperand<double>{x, HeadLayout::of(x.shape(), false, H, D, 0)}; };
    const std::array<std::size_t, 3> out_shape{L, N, E};
    const HeadLayout out = HeadLayout::of(out_shape, false, H, D, 0);
    const xt::xtensor<double, 3> seed = randn<3>(out_shape, 4);
    const double scale = 0.5;

    Tape fused_tape, two_op_tape;  // a backward clears the gradients of its tape's every node
    TapeScope fused_scope(fused_tape);
    const Var<double, 3> fused = path == nn::AttentionPath::fused
                                     ? fused_attention(heads(q), heads(k), heads(v), scale, fill, out, out_shape)
                                     : memory_efficient_attention(heads(q), heads(k), heads(v), scale, fill, out, out_shape, 4);
    backward(fused, seed);
    const xt::xtensor<double, 3> fused_q = q.grad(), fused_k = k.grad(), fused_v = v.grad();
    q.zero_grad(), k.zero_grad(), v.zero_grad();
    TapeScope two_op_scope(two_op_tape);
    const Var<double, 3> weights = attention_weights(heads(q), heads(k), scale, fill);
    const Var<double, 3> context = attention_context(weights, heads(v), out, out_shape, live_keys_of(weights));
    backward(context, seed);
    check_close(fused.value(), context.value(), 1e-12, "output");
    check_close(fused_q, q.grad(), 1e-12, "query grad");
    check_close(fused_k, k.grad(), 1e-12, "key grad");
    check_close(fused_v, v.grad(), 1e-12, "value grad");
    CHECK(xt::amax(xt::abs(fused_k))() > 0);

    std::vector<std::string> names;
    struct Flat {  // an ArrayView's elements, for check_close
        const double* first;
        std::size_t count;
        std::size_t size() const { return count; }
        const double* data() const { return first; }
    };
    const auto as_tensor = [](const ArrayView& a) {
        REQUIRE(a.data);
        REQUIRE(a.is_double);
        std::size_t count = 1;
        for (std::size_t d : a.shape) count *= d;
        return Flat{static_cast<const double*>(a.data), count};
    };
    fused.node()->for_each_internal([&](const char* name, const char*, const ArrayView& value, const ArrayView& grad) {
        names.push_back(name);
        if (names.back() == "weights") {
            check_close(as_tensor(value), weights.value(), 1e-12, "weights");
            check_close(as_tensor(grad), weights.grad(), 1e-12, "weights grad");
        } else {
            weights.node()->for_each_internal([&](const char*, const char*, const ArrayView& want, const ArrayView& want_grad) {
                check_close(as_tensor(value), as_tensor(want), 1e-12, "scores");
                check_close(as_tensor(grad), as_tensor(want_grad), 1e-12, "scores grad");
            });
        }
    });
    CHECK(names == std::vector<std::string>{"scores", "weights"});
}

TEST_CASE("one-op attention (fused, memory_efficient): the two ops' results and study internals, each mask form") {
    constexpr std::size_t rows = 2 * 2 * 10, S = 11;  // N·H·L score rows
    std::mt19937_64 rng(9);
    std::vector<double> ignore(rows * S), additive(rows * S);  // per score row: the general form
    for (std::size_t i = 0; i < ignore.size(); ++i) ignore[i] = rng() % 100 < 30, additive[i] = double(rng() % 7) / 3.0;
    const auto general = [&](kernels::ScoreMasks<double>& masks) {
        std::copy(ignore.begin(), ignore.end(), masks.for_writing(masks.ignore, 1));
        std::copy(additive.begin(), additive.end(), masks.for_writing(masks.additive, 1));
    };
    const auto causal = [](kernels::ScoreMasks<double>& masks) { kernels::merge_causal(masks, S); };  // the rule
    const auto causal_after_one = [](kernels::ScoreMasks<double>& masks) { kernels::merge_causal(masks, S, 1); };
    const auto causal_and_general = [&](kernels::ScoreMasks<double>& masks) {  // the rule beside the rows
        general(masks);
        kernels::merge_causal(masks, S);
        REQUIRE(masks.causal.used);
    };
    for (nn::AttentionPath path : {nn::AttentionPath::fused, nn::AttentionPath::memory_efficient}) {
        INFO("path " << int(path));
        check_one_op_against_two_ops(path, general);
        check_one_op_against_two_ops(path, causal);
        check_one_op_against_two_ops(path, causal_after_one);
        check_one_op_against_two_ops(path, causal_and_general);
    }
}

TEST_CASE("one-op attention (fused, memory_efficient): 2 threads give the 1-thread result exactly") {
    for (nn::AttentionPath path : {nn::AttentionPath::fused, nn::AttentionPath::memory_efficient}) {
        INFO("path " << int(path));
        const Shape s{2, 96, 96, 64, 4};  // 4·N·H·L·S·D = 4.7 MFLOP: above parallel_min_work
        auto m = make_module<double>(s, false, false);
        auto fo = make_masks<double>(Masks::kpm_bool, s, 1);
        fo.need_weights = false, fo.path = path;
        const xt::xtensor<double, 3> values = randn<3>({s.S, s.N, s.E}, 6);
        const Run<double> one = run(m, s, false, fo, values);
        struct Threads {  // 2 threads for this scope
            Threads() { set_num_threads(2); }
            ~Threads() { set_num_threads(1); }
        };
        const Run<double> two = [&] {
            Threads two_threads;
            return run(m, s, false, fo, values);
        }();
        check_runs(two, one, 0);
    }
}

}  // namespace test_nn_attention_paths
