// nn::MultiheadAttention values: against torch.nn.MultiheadAttention (tests/fixtures/make_attention.py;
// the fixture's parameters are loaded into our module; output, attention weights and the gradients
// of query, key, value and every parameter must agree at rtol 1e-10), and by hand (masks, fully
// masked rows, is_causal, valid_lens, add_zero_attn).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "support/fixtures.hpp"
#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_attention_parity {

namespace {

using namespace xgrad;
using Mha = nn::MultiheadAttention<double>;
constexpr double inf = std::numeric_limits<double>::infinity();

template <class A>
bool all_finite(const A& a) {
    return std::all_of(a.begin(), a.end(), [](double x) { return std::isfinite(x); });
}

const std::string dir = std::string(XGRAD_FIXTURES) + "/attention/";

bool has(const std::string& c, const std::string& name) { return std::filesystem::exists(dir + c + "_" + name + ".npy"); }
xt::xarray<double> load(const std::string& c, const std::string& name) {
    return io::read_npy(dir + c + "_" + name + ".npy").as_xarray<double>();
}

double worst_error = 0;  // largest |ours - torch| / (1 + |torch|) over every compared value

template <class A>
void check_close(const A& ours, const xt::xarray<double>& ref, const std::string& what) {
    testing::check_parity(ours, ref, what, worst_error);
}

AnyMask<double> load_mask(const std::string& c, const std::string& name, int kind) {
    if (kind == 0) return {};
    auto m = load(c, name);
    if (kind == 2) return additive_mask(m);
    return ignore_mask(xt::xarray<bool>(xt::not_equal(m, 0.0)));
}

template <std::size_t N>
void run_case(const std::string& c, const xt::xarray<double>& cfg) {
    auto flag = [&](std::size_t i) { return cfg(i) != 0; };
    auto dim = [&](std::size_t i) { return static_cast<std::size_t>(cfg(i)); };
    nn::MultiheadAttentionOptions o;
    o.embed_dim = dim(0), o.num_heads = dim(1), o.kdim = dim(2), o.vdim = dim(3);
    o.bias = flag(4), o.add_bias_kv = flag(5), o.add_zero_attn = flag(6), o.batch_first = flag(7);
    Generator gen(3);
    Mha mha(o, gen);

    std::size_t loaded = 0;
    for_each_parameter(mha, [&](const std::string& name, auto& p) {
        std::string file = name;
        std::replace(file.begin(), file.end(), '.', '_');
        REQUIRE_MESSAGE(has(c, file), c << ": torch has no parameter " << name);
        const auto v = load(c, file);
        REQUIRE_MESSAGE(std::equal(v.shape().begin(), v.shape().end(), p.shape().begin(), p.shape().end()),
                        c << ": " << name << " ours " << shape_str(p.shape()) << " torch " << shape_str(v.shape()));
        std::copy(v.begin(), v.end(), p.value().begin());
        ++loaded;
    });
    std::size_t torch_params = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string f = e.path().filename().string(), prefix = c + "_grad_";
        const bool is_grad = f.rfind(prefix, 0) == 0;
        const std::string what = is_grad ? f.substr(prefix.size()) : "";
        if (is_grad && what != "query.npy" && what != "key.npy" && what != "value.npy" && what != "output.npy")
            ++torch_params;
    }
    CHECK_MESSAGE(loaded == torch_params, c << ": parameter count differs from torch");

    auto input = [&](const char* name) { return parameter(xt::xtensor<double, N>(load(c, name))); };
    const auto query = input("query"), key = input("key"), value = input("value");
    nn::MhaForwardOptions<double> fo;
    fo.need_weights = flag(9), fo.average_attn_weights = flag(10), fo.is_causal = flag(11);
    fo.key_padding_mask = load_mask(c, "key_padding_mask", int(cfg(12)));
    fo.attn_mask = load_mask(c, "attn_mask", int(cfg(13)));
    if (flag(14)) fo.valid_lens = valid_lens(xt::xarray<std::int64_t>(load(c, "valid_lens")));

    const auto r = mha.forward(query, key, value, fo);
    check_close(r.output.value(), load(c, "output"), c + " output");
    if (fo.need_weights) {
        if (fo.average_attn_weights) {
            check_close(r.attn_weights.value(), load(c, "attn_weights"), c + " attn_weights");
            CHECK_FALSE(r.attn_weights_per_head);
        } else {
            check_close(r.attn_weights_per_head.value(), load(c, "attn_weights"), c + " attn_weights per head");
            CHECK_FALSE(r.attn_weights);
        }
    } else {
        CHECK_FALSE(r.attn_weights);
        CHECK_FALSE(r.attn_weights_per_head);
    }

    backward(r.output, xt::xtensor<double, N>(load(c, "grad_output")));
    check_close(query.grad(), load(c, "grad_query"), c + " grad query");
    check_close(key.grad(), load(c, "grad_key"), c + " grad key");
    check_close(value.grad(), load(c, "grad_value"), c + " grad value");
    for_each_parameter(mha, [&](const std::string& name, auto& p) {
        std::string file = "grad_" + name;
        std::replace(file.begin(), file.end(), '.', '_');
        check_close(p.grad(), load(c, file), c + " " + file);
    });
    tape().clear();
}

}  // namespace

TEST_CASE("MultiheadAttention matches torch.nn.MultiheadAttention (output, weights, every gradient)") {
    const std::vector<std::string> cases = {"plain",
                                            "batch_first_kpm_bool",
                                            "nobias_attn2_bool",
                                            "bias_kv_attn2_float",
                                            "zero_attn_kpm_float",
                                            "kvdim_attn3_bool_kpm_bool",
                                            "kvdim_all_bf_attn3_float_kpm_bool",
                                            "unbatched_kpm_bool_attn2_float",
                                            "unbatched_kvdim_bias_kv_attn3_bool_per_head",
                                            "causal_bias_kv_zero_attn",
                                            "per_head_nobias_kpm_bool_attn2_bool",
                                            "no_weights_bf_zero_attn_causal",
                                            "valid_lens_batch",
                                            "valid_lens_per_query_bf",
                                            "wide_e6_h3"};
    for (const auto& c : cases) {
        CAPTURE(c);
        REQUIRE_MESSAGE(has(c, "config"), "missing fixture: run tests/fixtures/make_attention.py");
        const auto cfg = load(c, "config");
        if (cfg(8) != 0)
            run_case<3>(c, cfg);
        else
            run_case<2>(c, cfg);
    }
    MESSAGE("largest parity error |ours - torch| / (1 + |torch|): " << worst_error);
}

// ---- values by hand ----

namespace {
// E = 2, one head, in-projections and out_proj the identity with zero biases: the module is plain
// softmax(q·kᵀ/√2)·v attention.
Mha identity_module(bool bias = true) {
    Generator g;
    Mha m({.embed_dim = 2, .num_heads = 1, .bias = bias}, g);
    m.in_proj_weight.value() = xt::xtensor<double, 2>{{1, 0}, {0, 1}, {1, 0}, {0, 1}, {1, 0}, {0, 1}};
    m.out_proj.weight.value() = xt::xtensor<double, 2>{{1, 0}, {0, 1}};
    return m;
}
}  // namespace

TEST_CASE("MultiheadAttention values by hand: uniform weights, masks, fully masked row") {
    Mha m = identity_module();
    // a zero query scores every key 0: the output is the mean of the (unmasked) values
    const auto q = parameter(xt::xtensor<double, 3>{{{0, 0}}});                      // (L=1, N=1, E=2)
    const auto kv = parameter(xt::xtensor<double, 3>{{{1, 2}}, {{3, -4}}, {{5, 8}}});  // (S=3, N=1, E=2)
    auto r = m.forward(q, kv, kv);
    CHECK(r.output.value()(0, 0, 0) == doctest::Approx(3.0));
    CHECK(r.output.value()(0, 0, 1) == doctest::Approx(2.0));
    CHECK(r.attn_weights.value()(0, 0, 2) == doctest::Approx(1.0 / 3));

    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>{{false, true, false}});
    r = m.forward(q, kv, kv, fo);  // keys 0 and 2: mean (3, 5)
    CHECK(r.output.value()(0, 0, 0) == doctest::Approx(3.0));
    CHECK(r.output.value()(0, 0, 1) == doctest::Approx(5.0));
    CHECK(r.attn_weights.value()(0, 0, 1) == 0.0);

    fo.key_padding_mask = additive_mask(xt::xarray<double>{{0, std::log(2.0), -inf}});  // weights 1/3, 2/3, 0
    r = m.forward(q, kv, kv, fo);
    CHECK(r.output.value()(0, 0, 0) == doctest::Approx(1.0 / 3 + 2.0));
    CHECK(r.attn_weights.value()(0, 0, 1) == doctest::Approx(2.0 / 3));

    // every key ignored: zero weights and a zero attention vector (output = out_proj.bias), zero
    // gradient; torch gives NaN here
    m.out_proj.bias.value() = xt::xtensor<double, 1>{0.5, -1};
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>{{true, true, true}});
    r = m.forward(q, kv, kv, fo);
    CHECK(r.output.value()(0, 0, 0) == 0.5);
    CHECK(r.output.value()(0, 0, 1) == -1.0);
    CHECK(r.attn_weights.value()(0, 0, 0) == 0.0);
    backward(r.output, xt::xtensor<double, 3>(xt::ones<double>({1, 1, 2})));
    CHECK(all_finite(q.grad()));
    CHECK(all_finite(kv.grad()));
    CHECK(xt::all(xt::equal(kv.grad(), 0.0)));
    CHECK(xt::all(xt::equal(m.in_proj_weight.grad(), 0.0)));
    CHECK(all_finite(m.out_proj.weight.grad()));
}

TEST_CASE("MultiheadAttention: is_causal, valid_lens, bias_kv and zero_attn columns are never masked") {
    Mha m = identity_module();
    const auto x = parameter(xt::xtensor<double, 2>{{0, 0}, {0, 0}, {0, 0}});  // unbatched (L = S = 3)
    const auto kv = parameter(xt::xtensor<double, 2>{{3, 0}, {0, 3}, {6, 6}});
    nn::MhaForwardOptions<double> fo;
    fo.is_causal = true;
    auto r = m.forward(x, kv, kv, fo);  // query i averages keys 0..i
    CHECK(r.output.value()(0, 0) == doctest::Approx(3.0));
    CHECK(r.output.value()(1, 1) == doctest::Approx(1.5));
    CHECK(r.output.value()(2, 0) == doctest::Approx(3.0));
    fo = {};
    fo.valid_lens = valid_lens(xt::xtensor<std::int64_t, 1>{2, 0, 3});  // per query
    r = m.forward(x, kv, kv, fo);
    CHECK(r.output.value()(0, 0) == doctest::Approx(1.5));
    CHECK(r.output.value()(1, 0) == 0.0);
    CHECK(r.attn_weights.value()(2, 2) == doctest::Approx(1.0 / 3));
    fo.valid_lens = valid_lens(xt::xarray<std::int64_t>(1));  // one length for the whole (unbatched) sequence
    r = m.forward(x, kv, kv, fo);
    CHECK(r.output.value()(2, 0) == doctest::Approx(3.0));

    Generator g;  // add_zero_attn: a zero key (score 0) and zero value are appended, never masked
    Mha z({.embed_dim = 2, .num_heads = 1, .add_zero_attn = true}, g);
    z.in_proj_weight.value() = m.in_proj_weight.value();
    z.out_proj.weight.value() = m.out_proj.weight.value();
    fo = {};
    fo.key_padding_mask = ignore_mask(xt::xarray<bool>{true, false, true});
    r = z.forward(x, kv, kv, fo);  // keys: 1 and the zero key -> (0, 3) / 2
    CHECK(r.output.value()(0, 1) == doctest::Approx(1.5));
    CHECK(r.attn_weights.shape(1) == 4);
    CHECK(r.attn_weights.value()(0, 3) == doctest::Approx(0.5));
}

}  // namespace test_nn_attention_parity
