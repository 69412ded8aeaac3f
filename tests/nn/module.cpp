// Module reflection (nn/module.hpp): dotted names through nested modules and vectors, absent
// parameters skipped, parameter_count, zero_grad, set_training reaching nested submodules.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_module {

using namespace xgrad;

namespace {

template <Real T>
struct Block {
    BOOST_HANA_DEFINE_STRUCT(Block, (nn::LayerNorm<T>, norm), (nn::Linear<T>, proj), (nn::Dropout, drop));
};

template <Real T>
struct Net {
    BOOST_HANA_DEFINE_STRUCT(Net, (nn::Embedding<T>, embed), (nn::PositionalEncoding<T>, pos),
                             (std::vector<Block<T>>, layers), (nn::Linear<T>, head), (std::vector<Var<T, 1>>, gains),
                             (Var<T, 0>, scale));
    bool training = true;

    Net(Generator& gen) {
        embed = nn::Embedding<T>(7, 4, gen);
        pos = nn::PositionalEncoding<T>({.d_model = 4, .dropout = 0.1, .batch_first = true, .max_len = 16}, 2);
        for (int i = 0; i < 2; ++i) {
            Block<T> b;
            b.norm = nn::LayerNorm<T>(4, 1e-5, i == 0);  // the second block's norm has no affine
            b.proj = nn::Linear<T>(4, 4, gen, i == 1);   // the first block's proj has no bias
            b.drop = nn::Dropout(0.2, gen);
            layers.push_back(b);
        }
        head = nn::Linear<T>(4, 2, gen);
        gains = {parameter(xt::xtensor<T, 1>{1, 2}), Var<T, 1>{}, parameter(xt::xtensor<T, 1>{3})};
        scale = parameter(xt::xtensor<T, 0>(T(1.5)));
    }

    Var<T, 3> operator()(const xt::xtensor<std::int64_t, 2>& tokens) const {
        Var<T, 3> h = pos(embed(tokens));
        for (const auto& b : layers) h = b.drop(b.proj(b.norm(h)));
        return head(h) * scale;
    }
};

std::vector<std::string> names_of(const auto& params) {
    std::vector<std::string> out;
    for (const auto& p : params) out.push_back(p.name);
    return out;
}

}  // namespace

TEST_CASE("named_parameters: PyTorch dotted names, nested modules and vectors, absent ones skipped") {
    Generator gen(1);
    Net<double> net(gen);
    const auto params = named_parameters<double>(net);
    const std::vector<std::string> want = {
        "embed.weight",      "layers.0.norm.weight", "layers.0.norm.bias", "layers.0.proj.weight",
        "layers.1.proj.weight", "layers.1.proj.bias", "head.weight",       "head.bias",
        "gains.0",           "gains.2",              "scale"};
    CHECK(names_of(params) == want);
    CHECK(params[0].shape == std::vector<std::size_t>{7, 4});
    CHECK(params[3].shape == std::vector<std::size_t>{4, 4});
    CHECK(params[10].shape.empty());
    CHECK(params[10].size == 1);
    CHECK(params[0].value == net.embed.weight.value().data());  // views, not copies
    CHECK(params[0].node == net.embed.weight.node());
    // a standalone Linear and a LayerNorm: torch's names
    nn::Linear<double> lin(3, 2, gen);
    CHECK(names_of(named_parameters<double>(lin)) == std::vector<std::string>{"weight", "bias"});
    nn::Linear<double> nobias(3, 2, gen, false);
    CHECK(names_of(named_parameters<double>(nobias)) == std::vector<std::string>{"weight"});
    nn::PositionalEncoding<double> pe({.d_model = 4}, 1);
    CHECK(named_parameters<double>(pe).empty());
}

// A user's module that takes expressions as the library's do (module_input).
struct UserBlock {
    BOOST_HANA_DEFINE_STRUCT(UserBlock, (nn::Linear<double>, proj));
    template <class X>
    Var<double, 2> operator()(const X& x) const {
        const auto h = module_input<double>(x);  // a Var as it is; an expression materialized once
        return proj(h) + h;
    }
};

TEST_CASE("module_input: a user's module takes a Var or an elementwise expression") {
    Generator gen(3);
    const UserBlock block{nn::Linear<double>(3, 3, gen)};
    const auto x = parameter(xt::xtensor<double, 2>{{1, 2, 3}, {-1, 0, 2}});  // recorded: it needs a gradient
    const std::size_t before = tape().size();
    const Var<double, 2> from_expression = block(x * 2.0 + 1.0);
    const std::size_t nodes = tape().size() - before;
    const Var<double, 2> from_var = block(Var<double, 2>(x * 2.0 + 1.0));
    CHECK(from_expression.value() == from_var.value());
    CHECK(nodes == 3);  // the expression's node, the linear, the sum
    tape().clear();
}

TEST_CASE("parameter_count sums every present parameter") {
    Generator gen(2);
    Net<float> net(gen);
    // embed 7·4, norm 4 + 4, proj0 16, proj1 16 + 4, head 8 + 2, gains 2 + 1, scale 1
    CHECK(parameter_count(net) == 28 + 8 + 16 + 20 + 10 + 3 + 1);
    CHECK(parameter_count(nn::LayerNorm<double>(5)) == 10);
    CHECK(parameter_count(nn::Dropout(0.5, 1)) == 0);
}

TEST_CASE("zero_grad: a backward fills the reached parameters' grads, zero_grad forgets them all") {
    Generator gen(3);
    Net<double> net(gen);
    set_training(net, false);  // deterministic forward
    backward(sum(net(xt::xtensor<std::int64_t, 2>{{1, 2, 3}, {0, 6, 1}})));
    const auto params = named_parameters<double>(net);
    for (const auto& p : params) {
        CAPTURE(p.name);
        if (p.name.starts_with("gains")) CHECK(p.grad() == nullptr);  // not used by the forward
        else CHECK(p.grad() != nullptr);
    }
    // the scale's gradient is Σ head(h) = Σ y / scale
    CHECK(net.scale.grad()() != 0);
    zero_grad(net);
    for (const auto& p : params) CHECK(p.grad() == nullptr);
    // ParameterRef::zero_grad works per parameter
    backward(sum(net(xt::xtensor<std::int64_t, 2>{{1}})));
    params[0].zero_grad();
    CHECK(params[0].grad() == nullptr);
    CHECK(params[6].grad() != nullptr);
    tape().clear();
}

TEST_CASE("set_training flips `training` in the module and every nested Dropout") {
    Generator gen(4);
    Net<double> net(gen);
    auto all_training = [&](bool want) {
        CHECK(net.training == want);
        CHECK(net.pos.dropout.training == want);
        for (const auto& b : net.layers) CHECK(b.drop.training == want);
    };
    all_training(true);
    set_training(net, false);
    all_training(false);
    set_training(net, true);
    all_training(true);
    set_training(net, false);
    all_training(false);
    // in eval mode the forward is deterministic
    const xt::xtensor<std::int64_t, 2> tokens{{1, 2}};
    CHECK(net(tokens).value() == net(tokens).value());
    tape().clear();
}

TEST_CASE("named_parameters rejects a module of another dtype at compile time; float modules work") {
    Generator gen(5);
    nn::Embedding<float> emb(3, 2, gen);
    auto params = named_parameters<float>(emb);
    REQUIRE(params.size() == 1);
    CHECK(params[0].size == 6);
    CHECK(params[0].grad() == nullptr);
    backward(emb(xt::xtensor<std::int64_t, 1>{2, 2}), xt::xtensor<float, 2>{{1, 2}, {3, 4}});
    REQUIRE(params[0].grad() != nullptr);
    CHECK(params[0].grad()[4] == 4.0f);  // row 2 twice: (1 + 3, 2 + 4)
    CHECK(params[0].grad()[5] == 6.0f);
    tape().clear();
}

}  // namespace test_nn_module
