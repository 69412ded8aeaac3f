// nn::Llama against llama2.c's own model.py (tests/fixtures/make_llama.py): logits, loss and the
// gradient of every parameter under model.py's state-dict names, with grouped-query, multi-query
// and plain multi-head attention; in float64 (model.py's float32 casts made no-ops) and in float32
// as written; and nn::generate on it, greedy against model.py's generate, the cache against
// recomputing the window.
#include <cmath>
#include <map>
#include <string>

#include <doctest/doctest.h>

#include "support/fixtures.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/nn/llama.hpp"

namespace test_nn_llama_parity {

using namespace xgrad;

struct Case {
    std::map<std::string, io::NpyArray> a;
    explicit Case(const std::string& name) : a(io::read_npz(std::string(XGRAD_FIXTURES) + "/llama/" + name + ".npz")) {}
    double cfg(const std::string& field) const { return a.at("cfg." + field).as_xarray<double>()(); }
    nn::LlamaConfig config() const {
        nn::LlamaConfig c;
        c.dim = std::size_t(cfg("dim")), c.n_layers = std::size_t(cfg("n_layers")), c.n_heads = std::size_t(cfg("n_heads"));
        if (cfg("n_kv_heads") >= 0) c.n_kv_heads = std::size_t(cfg("n_kv_heads"));
        if (cfg("hidden_dim") >= 0) c.hidden_dim = std::size_t(cfg("hidden_dim"));
        c.vocab_size = std::size_t(cfg("vocab_size")), c.multiple_of = std::size_t(cfg("multiple_of"));
        c.norm_eps = cfg("norm_eps"), c.max_seq_len = std::size_t(cfg("max_seq_len"));
        return c;
    }
    xt::xtensor<std::int64_t, 2> ids(const std::string& key) const { return a.at(key).as<std::int64_t, 2>(); }
};

// |ours − ref| <= tol · (1 + |ref|) everywhere; the largest such ratio into `worst`
template <class A>
void check_close(const A& ours, const io::NpyArray& ref_array, double tol, const std::string& what, double& worst) {
    const auto ref = ref_array.as_xarray<double>();
    INFO(what);
    REQUIRE(ours.size() == ref.size());
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double err = std::abs(double(ours.data()[i]) - ref.data()[i]) / (1 + std::abs(ref.data()[i]));
        worst = std::max(worst, err);
        bad += !(err <= tol);
    }
    CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ");
}

template <Real T>
double check_case(const std::string& name, double tol) {
    CAPTURE(name);
    const Case c(name);
    Generator gen(1);
    nn::Llama<T> model(c.config(), gen);
    io::load_state_dict(model, c.a, {.convert_dtype = true, .prefix = "param."}, "fixture " + name);
    CHECK(model.output.weight.node() == model.tok_embeddings.weight.node());  // still tied
    const auto idx = c.ids("in.idx"), targets = c.ids("in.targets");
    double worst = 0;
    const Var<T, 3> logits = model(idx);
    check_close(logits.value(), c.a.at("out.logits"), tol, "logits", worst);
    const Var<T, 0> loss = model.loss(idx, targets);
    check_close(loss.value(), c.a.at("out.loss"), tol, "loss", worst);
    backward(loss);
    std::size_t checked = 0;
    for_each_parameter_name(model, [&](const std::string& pname, const auto& var) {
        CAPTURE(pname);
        REQUIRE(var.has_grad());
        CHECK(xt::amax(xt::abs(var.grad()))() > 0);
        check_close(var.grad(), c.a.at("grad." + pname), tol, "grad " + pname, worst);
        ++checked;
    });
    CHECK(checked == 2 + 9 * model.layers.size() + 1);  // embedding, output (tied), 9 per layer, norm
    tape().clear();
    return worst;
}

TEST_CASE("nn::Llama matches llama2.c's model.py: logits, loss, every gradient (float64, grouped and multi-query)") {
    const double gqa = check_case<double>("gqa", 1e-12), mqa = check_case<double>("mqa_full", 1e-12);
    MESSAGE("worst relative error against model.py in float64: grouped " << gqa << ", multi-query " << mqa);
}

TEST_CASE("nn::generate on nn::Llama: model.py's greedy tokens; the key/value cache gives the recomputed window's") {
    for (const std::string name : {"gqa", "mqa_full"}) {
        CAPTURE(name);
        const Case c(name);
        Generator gen(1);
        nn::Llama<double> model(c.config(), gen);
        io::load_state_dict(model, c.a, {.convert_dtype = true, .prefix = "param."}, "fixture " + name);
        const auto idx = c.ids("in.idx");
        const std::size_t new_tokens = model.config.max_seq_len;  // past max_seq_len: the window slides
        const auto greedy = nn::generate(model, idx, new_tokens, gen, {.temperature = 0});
        CHECK(greedy == c.ids("out.greedy"));
        Generator g1(7), g2(7);  // sampled: the cache against recomputing the window for every token
        const auto cached = nn::generate(model, idx, new_tokens, g1, {.temperature = 1.5, .top_k = 5});
        const auto recomputed = nn::generate(model, idx, new_tokens, g2, {.temperature = 1.5, .top_k = 5, .use_cache = false});
        CHECK(cached == recomputed);
        CHECK(cached != greedy);
    }
}

TEST_CASE("nn::Llama matches llama2.c's model.py in float32 as written") {
    MESSAGE("worst relative error against model.py in float32: " << check_case<float>("mha_float32", 2e-5));
}

TEST_CASE("nn::Llama: llama2.c's hidden-size rule, the config's checks and model.py's init") {
    CHECK(nn::swiglu_hidden_dim(288, 32) == 768);     // stories15M
    CHECK(nn::swiglu_hidden_dim(4096, 256) == 11008);  // Llama 2 7B
    CHECK(nn::swiglu_hidden_dim(8192, 4096, 1.3) == 28672);  // Llama 2 70B (ffn_dim_multiplier 1.3)
    nn::LlamaConfig c{.dim = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 3, .vocab_size = 10, .multiple_of = 8,
                      .max_seq_len = 8};
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("n_kv_heads 3 does not divide n_heads 4"), value_error);
    c.n_kv_heads = 2, c.n_heads = 8;
    CHECK_THROWS_WITH_AS(c.validate(), doctest::Contains("head size dim / n_heads = 3 must be even"), value_error);
    c.n_heads = 4, c.dim = 256, c.n_layers = 4, c.vocab_size = 64;
    Generator gen(5);
    const nn::Llama<double> m(c, gen);
    const auto std_of = [](const Var<double, 2>& w) { return std::sqrt(xt::mean(xt::square(w.value()))()); };
    CHECK(std_of(m.layers[0].attention.wq.weight) == doctest::Approx(0.02).epsilon(0.05));
    CHECK(std_of(m.layers[1].feed_forward.w3.weight) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
    CHECK(std_of(m.layers[1].attention.wo.weight) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
    CHECK(std_of(m.layers[1].feed_forward.w2.weight) == doctest::Approx(0.02).epsilon(0.05));
    CHECK(m.layers[0].attention.wk.weight.shape() == std::array<std::size_t, 2>{128, 256});  // 2 kv heads of 64
    CHECK(m.layers[0].feed_forward.w1.weight.shape(0) == 688);  // 2·1024/3 = 682, up to a multiple of 8
    CHECK(xt::all(xt::equal(m.norm.weight.value(), 1.0)));
    CHECK(m.output.weight.node() == m.tok_embeddings.weight.node());
}

}  // namespace test_nn_llama_parity
