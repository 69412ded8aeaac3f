// The module system under a deep model (issue "Modules for deep models"): copies and clones,
// std::array / std::optional members, tied parameters, expressions into module calls, modules
// owning their generators, PositionalEncoding's layout. Each TEST_CASE names the trap it covers.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "support/porting_model.hpp"
#include "xgrad/io/checkpoint.hpp"
#include "xgrad/xgrad.hpp"
#include "xgrad/io/state_dict.hpp"

namespace test_nn_deep_models {

using namespace xgrad;

namespace {

// An encoder-style layer as DETR writes it (positions added to queries and keys, dropout, a
// norm), E = 4, two heads.
template <Real T>
struct Layer : testing::Layer<T> {
    Layer() = default;
    explicit Layer(Generator& gen, double p = 0.1) : testing::Layer<T>(4, 2, p, gen) {}
};
constexpr std::size_t layer_numbers = (48 + 12 + 16 + 4) + (16 + 4) + (4 + 4);  // self_attn, linear1, norm1: 8 tensors

template <class M>
std::vector<std::string> names_of(M& m) {
    std::vector<std::string> out;
    for (const auto& p : named_parameters<double>(m)) out.push_back(p.name);
    return out;
}

struct ArrayStack {
    BOOST_HANA_DEFINE_STRUCT(ArrayStack, (std::array<nn::Linear<double>, 3>, layers),
                             (std::optional<nn::LayerNorm<double>>, norm), (std::optional<nn::Linear<double>>, head));
};

struct VectorStack {
    BOOST_HANA_DEFINE_STRUCT(VectorStack, (std::vector<Layer<double>>, layers));
};

// A language model whose output layer reuses the embedding table (deliberate tying).
struct TiedLM {
    BOOST_HANA_DEFINE_STRUCT(TiedLM, (nn::Embedding<double>, embed), (nn::Linear<double>, out));
    explicit TiedLM(Generator& gen) : embed(5, 3, gen), out(3, 5, gen) { out.weight = embed.weight; }
    Var<double, 2> operator()(const xt::xtensor<std::int64_t, 1>& tokens) const { return out(embed(tokens)); }
};

// docs/porting.md's learned positional embedding: x (S, N, E) + table[:S], broadcast over N.
template <Real T>
struct LearnedPositions {
    BOOST_HANA_DEFINE_STRUCT(LearnedPositions, (nn::Embedding<T>, table));
    LearnedPositions(std::size_t max_len, std::size_t d_model, Generator& gen) : table(max_len, d_model, gen) {}
    Var<T, 3> operator()(const Var<T, 3>& x) const {
        const long S = long(x.shape(0)), E = long(x.shape(2));
        return x + reshape<3>(slice(table.weight, 0, 0, S), {S, 1, E});
    }
};

Var<double, 3> input(std::uint64_t seed, std::array<std::size_t, 3> shape = {3, 2, 4}) {
    return constant(randn<3>(shape, seed));
}

}  // namespace

TEST_CASE("trap: copying a module shares its tensors; the tied-parameter rules make it visible, nn::clones separates") {
    Generator gen(1);
    const Layer<double> layer(gen);
    VectorStack copied;
    copied.layers = std::vector<Layer<double>>(3, layer);  // three handles on ONE layer
    // counted once (was 3 ×), and the sharing is listed by name
    CHECK(parameter_count(copied) == layer_numbers);
    const auto groups = tied_parameters(copied);
    REQUIRE(groups.size() == 8);  // every parameter of the layer
    CHECK(groups[0] == std::vector<std::string>{"layers.0.self_attn.in_proj_weight", "layers.1.self_attn.in_proj_weight",
                                                "layers.2.self_attn.in_proj_weight"});
    // a checkpoint of three different layers cannot be loaded into three copies of one: an error, not "last wins"
    VectorStack distinct;
    distinct.layers = nn::clones(layer, 3);
    init::constant_(distinct.layers[2].linear1.bias, 7.0);
    const auto before = copied.layers[0].linear1.bias.value();
    CHECK_THROWS_WITH_AS(io::load_state_dict(copied, io::state_dict(distinct)),
                         doctest::Contains("layers.0.linear1.bias and layers.2.linear1.bias are one tensor in the model "
                                           "(tied) but have different values in the file"),
                         io_error);
    CHECK(copied.layers[0].linear1.bias.value() == before);  // unchanged
    // nn::clones: independent layers with the same values
    CHECK(parameter_count(distinct) == 3 * layer_numbers);
    CHECK(tied_parameters(distinct).empty());
    CHECK(distinct.layers[1].self_attn.in_proj_weight.value() == layer.self_attn.in_proj_weight.value());
    CHECK(distinct.layers[1].self_attn.in_proj_weight.node() != layer.self_attn.in_proj_weight.node());
    optim::Adam<double> adam(distinct, {.lr = 0.1});
    CHECK(adam.parameters().size() == 3 * 8);
}

TEST_CASE("nn::clone: new tensors, same values, no gradient, generators copied; tying inside is kept") {
    Generator gen(2);
    Layer<double> layer(gen);
    set_training(layer, false);
    backward(sum(layer(input(1), input(2))));
    REQUIRE(layer.linear1.weight.has_grad());
    Layer<double> copy = nn::clone(layer);
    CHECK(!copy.linear1.weight.has_grad());
    CHECK(copy.linear1.weight.value() == layer.linear1.weight.value());
    copy.linear1.weight.value()(0, 0) += 1;  // changing the clone leaves the original alone
    CHECK(copy.linear1.weight.value()(0, 0) == layer.linear1.weight.value()(0, 0) + 1);
    CHECK(copy.dropout1.generator != layer.dropout1.generator);
    CHECK(copy.dropout1.generator->state() == layer.dropout1.generator->state());
    CHECK(!copy.training);
    tape().clear();

    TiedLM lm(gen);
    TiedLM lm2 = nn::clone(lm);
    CHECK(lm2.out.weight.node() == lm2.embed.weight.node());  // still tied, to its own tensor
    CHECK(lm2.out.weight.node() != lm.out.weight.node());
}

TEST_CASE("nn::clones: each copy draws its own reproducible dropout masks") {
    Generator gen(3);
    const Layer<double> layer(gen, 0.5);
    const auto a = nn::clones(layer, 2), b = nn::clones(layer, 2);
    const auto x = input(3, {4, 2, 4}), pos = input(4, {4, 2, 4});
    const auto a0 = a[0](x, pos).value(), a1 = a[1](x, pos).value();
    CHECK(a0 != a1);                        // the same weights, other masks
    CHECK(b[0](x, pos).value() == a0);      // reproducible from the layer's seeds
    CHECK(b[1](x, pos).value() == a1);
    tape().clear();
}

TEST_CASE("trap: std::array and std::optional members are walked with PyTorch's names (were skipped: 0 parameters)") {
    Generator gen(4);
    ArrayStack s;
    for (auto& l : s.layers) l = nn::Linear<double>(2, 2, gen);
    s.norm = nn::LayerNorm<double>(2);
    CHECK(names_of(s) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                                                  "layers.2.weight", "layers.2.bias", "norm.weight", "norm.bias"});
    CHECK(parameter_count(s) == 3 * 6 + 4);
    CHECK(io::state_dict(s).size() == 8);
    optim::Adam adam(s, {.lr = 0.1});
    CHECK(adam.parameters().size() == 8);
    ArrayStack empty;  // default-constructed: no tensors at all; an optimizer of nothing is refused
    CHECK_THROWS_WITH_AS(optim::Adam<double>(empty, {.lr = 0.1}),
                         "Adam: no parameters to optimize (an empty list, or a model without any)", value_error);
    s.head = nn::Linear<double>(2, 1, gen);  // an optional present: walked like a member
    CHECK(names_of(s).back() == "head.bias");
    // the names walk deeper too: layers.0.self_attn.in_proj_weight
    VectorStack v;
    v.layers = nn::clones(Layer<double>(gen), 2);
    CHECK(names_of(v)[0] == "layers.0.self_attn.in_proj_weight");
    CHECK(names_of(v)[8] == "layers.1.self_attn.in_proj_weight");
}

TEST_CASE("tied parameters as PyTorch: walked once, counted once, updated once, saved under every name") {
    Generator gen(5);
    TiedLM lm(gen);
    CHECK(names_of(lm) == std::vector<std::string>{"embed.weight", "out.bias"});
    CHECK(parameter_count(lm) == 15 + 5);
    CHECK(tied_parameters(lm) == std::vector<std::vector<std::string>>{{"embed.weight", "out.weight"}});
    const auto sd = io::state_dict(lm);
    REQUIRE(sd.size() == 3);
    CHECK(sd.count("out.weight") == 1);

    // one SGD step: w -= lr · (gradient from both uses), once
    optim::SGD<double> sgd(lm, {.lr = 0.1});
    const xt::xtensor<double, 2> w0 = lm.embed.weight.value();
    backward(sum(lm(xt::xtensor<std::int64_t, 1>{1, 3})));
    const xt::xtensor<double, 2> g = lm.embed.weight.grad();
    CHECK(xt::amax(xt::abs(g))() > 0);
    sgd.step();
    CHECK(xt::allclose(lm.embed.weight.value(), w0 - 0.1 * g, 0, 1e-15));
    optim::Adam<double> adam(lm, {.lr = 0.1});  // was: "is the same tensor as an earlier parameter"
    CHECK(adam.parameters().size() == 2);
    tape().clear();

    // loading: equal values under both names load; different ones are refused, naming both
    TiedLM other(gen);
    io::load_state_dict(other, sd);
    CHECK(other.embed.weight.value() == sd.at("embed.weight").as<double, 2>());
    CHECK(other.out.weight.node() == other.embed.weight.node());  // still tied
    auto bad = sd;
    bad.at("out.weight") = io::NpyArray::from(xt::xtensor<double, 2>(lm.embed.weight.value() + 1.0));
    CHECK_THROWS_WITH_AS(io::load_state_dict(other, bad),
                         doctest::Contains("embed.weight and out.weight are one tensor in the model (tied)"), io_error);
}

TEST_CASE("trap: module calls take expressions (materialized once, one node), as PyTorch code is written") {
    Generator gen(6);
    Layer<double> layer(gen);
    set_training(layer, false);
    const auto src = input(5), pos = input(6);
    // the same computation with every argument materialized by hand
    const Var<double, 3> qk = src + pos;
    const auto src2 = layer.self_attn.forward(qk, qk, src, {.need_weights = false}).output;
    const Var<double, 3> residual = src + layer.dropout1(src2);
    const auto by_hand = layer.norm1(layer.linear1(residual)).value();
    CHECK(layer(src, pos).value() == by_hand);
    // one node per expression argument
    tape().clear();
    const Var<double, 3> x = parameter(randn<3>({3, 2, 4}, 7));
    const std::size_t before = tape().size();
    const auto y = layer.linear1(x * 2.0);
    CHECK(tape().size() == before + 2);  // the expression, then the linear
    CHECK(y.value() == layer.linear1(Var<double, 3>(x * 2.0)).value());
    // one expression passed as query, key and value: materialized once, self-attention's packed projection
    const auto shifted = x + 1.0;
    tape().clear();
    const auto out = layer.self_attn.forward(shifted, shifted, shifted, {.need_weights = false}).output;
    std::size_t expressions = 0, packed = 0;
    for (std::size_t i = 0; i < tape().size(); ++i) {
        expressions += std::string(tape()[i].op_name()).starts_with("elementwise");
        packed += tape()[i].label == "qkv";
    }
    CHECK(expressions == 1);
    CHECK(packed == 1);
    const Var<double, 3> materialized = shifted;
    CHECK(out.value() == layer.self_attn.forward(materialized, materialized, materialized, {.need_weights = false})
                             .output.value());
    tape().clear();
}

TEST_CASE("trap: attention dropout needs no Generator* to set: modules own a seeded generator") {
    Generator g1(8), g2(8);
    Layer<double> a(g1, 0.5), b(g2, 0.5);
    const auto x = input(8), pos = input(9);
    const auto ya = a(x, pos).value();  // was: "dropout ... while training needs dropout_generator"
    CHECK(b(x, pos).value() == ya);     // same construction seed, same masks
    CHECK(a(x, pos).value() != ya);     // the stream moves on
    // every module's generator, by name, for checkpoints
    VectorStack v;
    v.layers = nn::clones(a, 2);
    NamedGenerators gens = named_generators(v);
    std::vector<std::string> names;
    for (const auto& [name, ptr] : gens) names.push_back(name);
    CHECK(names == std::vector<std::string>{"layers.0.self_attn.dropout_generator", "layers.0.dropout1.generator",
                                            "layers.1.self_attn.dropout_generator", "layers.1.dropout1.generator"});
    CHECK(gens[0].second == v.layers[0].self_attn.dropout_generator.get());
    tape().clear();
}

TEST_CASE("checkpoints save and restore every module's generator from named_generators") {
    const auto dir = std::filesystem::temp_directory_path() / "xgrad_test_deep_models";
    std::filesystem::create_directories(dir);
    const auto path = dir / "ckpt.npz";
    Generator gen(9);
    VectorStack v;
    v.layers = nn::clones(Layer<double>(gen, 0.5), 2);
    optim::SGD<double> sgd(v, {.lr = 0.01});
    const auto x = input(10), pos = input(11);
    auto step = [&] {
        Var<double, 3> h = x;
        for (const auto& l : v.layers) h = l(h, pos);
        const auto loss = sum(h * h);
        backward(loss);
        sgd.step();
        sgd.zero_grad();
        tape().clear();
        return loss.value()();
    };
    step();
    io::save_checkpoint(path, v, sgd, 1, named_generators(v, "model."));
    const double next = step();
    io::load_checkpoint(path, v, sgd, named_generators(v, "model."));
    CHECK(step() == next);  // the same masks again: bit for bit
    std::filesystem::remove_all(dir);
}

TEST_CASE("trap: PositionalEncoding takes the layout: (S, N, E) by default as MultiheadAttention, (N, S, E) batch_first") {
    nn::PositionalEncoding<double> seq_first({.d_model = 4, .dropout = 0.0, .max_len = 8}, 1);
    nn::PositionalEncoding<double> batch_first({.d_model = 4, .dropout = 0.0, .batch_first = true, .max_len = 8}, 1);
    const auto x = randn<3>({3, 2, 4}, 12);  // (S = 3, N = 2, E)
    const auto y = seq_first(constant(x)).value();
    const xt::xtensor<double, 3> xt_batch = xt::transpose(x, {1, 0, 2});  // (N, S, E)
    const auto yb = batch_first(constant(xt_batch)).value();
    for (std::size_t s = 0; s < 3; ++s)
        for (std::size_t n = 0; n < 2; ++n)
            for (std::size_t e = 0; e < 4; ++e) {
                CHECK(y(s, n, e) == x(s, n, e) + seq_first.table(s, e));  // position = axis 0, never the batch axis
                CHECK(yb(n, s, e) == y(s, n, e));
            }
    const auto u = seq_first(constant(xt::xtensor<double, 2>(xt::view(x, xt::all(), 0, xt::all())))).value();
    CHECK(u(2, 3) == y(2, 0, 3));  // unbatched (S, E)
    // a sequence longer than max_len along the layout's sequence axis
    CHECK_THROWS_WITH_AS(seq_first(constant(randn<3>({9, 1, 4}, 1))),
                         "PositionalEncoding: x (9, 1, 4) must be (T, N, d) with d = 4 and T <= max_len 8",
                         shape_error);
    CHECK_NOTHROW(batch_first(constant(randn<3>({9, 1, 4}, 1))));  // 9 is its batch size
}

TEST_CASE("a learned positional embedding (docs/porting.md): values added per position, gradients into its rows") {
    Generator gen(13);
    LearnedPositions<double> positions(6, 4, gen);
    const auto x = input(14);  // (S = 3, N = 2, E = 4)
    const auto y = positions(x);
    CHECK(y.value()(2, 1, 3) == x.value()(2, 1, 3) + positions.table.weight.value()(2, 3));
    backward(sum(y));
    const auto& g = positions.table.weight.grad();
    CHECK(g(2, 3) == 2.0);  // summed over the batch of 2
    CHECK(g(4, 0) == 0.0);  // beyond S: unused
    auto r = gradcheck([&](auto& table) {
        LearnedPositions<double> p = positions;
        p.table.weight = table;
        return p(x);
    }, positions.table.weight.value());
    CHECK(r.passed);
    tape().clear();
}

}  // namespace test_nn_deep_models
