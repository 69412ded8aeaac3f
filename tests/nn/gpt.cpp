// nn::GPT beyond nanoGPT's fixtures: GPT::loss against gpt_loss of the logits, sampling with the
// key/value cache against recomputation,
// cropping at block_size, top_k, Hugging Face's transposed state dicts, llm.c's file format, the
// decay groups of the optimizers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/io/gpt_formats.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/optim/adam.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/sgd.hpp"

namespace test_nn_gpt {

using namespace xgrad;
using Ids = xt::xtensor<std::int64_t, 2>;

nn::GPTConfig small_config(bool bias = true, nn::GeluForm gelu = nn::GeluForm::erf) {
    nn::GPTConfig c;
    c.n_layer = 2, c.n_head = 2, c.n_embd = 8, c.block_size = 6, c.vocab_size = 11, c.bias = bias, c.gelu = gelu;
    return c;
}

// A model with weights large enough that its predictions are far from uniform.
nn::GPT<double> small_model(const nn::GPTConfig& c, std::uint64_t seed) {
    Generator gen(seed);
    nn::GPT<double> m(c, gen);
    for_each_parameter(m, [&](const std::string&, auto& p) { init::normal_(p, 0, 0.5, gen); });
    set_training(m, false);
    return m;
}

TEST_CASE("GPT::loss (lm_head and the loss fused) gives gpt_loss(forward(idx).logits) and its gradients") {
    auto m = small_model(small_config(), 4);
    const Ids idx{{3, 1, 4, 1, 5, 9}, {2, 6, 5, 3, 5, 8}};
    const Ids targets{{1, 4, 1, 5, 9, 2}, {6, 5, -1, 5, 8, -1}};  // -1: ignored, as nanoGPT's
    std::map<std::string, xt::xtensor<double, 2>> grads[2];
    double losses[2];
    for (int fused = 0; fused < 2; ++fused) {
        const Var<double, 0> loss = fused ? m.loss(idx, targets) : nn::gpt_loss(m(idx), targets);
        backward(loss);
        losses[fused] = loss.value()();
        for_each_parameter(m, [&](const std::string& name, auto& p) {
            if constexpr (std::decay_t<decltype(p)>::rank == 2) grads[fused][name] = p.grad();
            p.zero_grad();
        });
        tape().clear();
    }
    CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(1e-13));
    REQUIRE(grads[0].size() == grads[1].size());
    for (const auto& [name, g] : grads[0]) {
        INFO(name);
        CHECK(xt::amax(xt::abs(grads[1][name] - g))() < 1e-12);
        CHECK(xt::amax(xt::abs(g))() > 1e-4);
    }
    CHECK_THROWS_WITH(m.loss(idx, Ids{{1, 2}}), "GPT::loss: targets have shape (1, 2) but idx (2, 6)");
}

TEST_CASE("GPT: the key/value cache gives the logits of a full forward, position by position") {
    const auto m = small_model(small_config(), 1);
    const Ids idx{{3, 1, 4, 1, 5, 9}, {2, 6, 5, 3, 5, 8}};
    const NoGrad no_grad;
    const Var<double, 3> full = m(idx);  // (2, 6, 11)
    std::vector<nn::KeyValueSource<double>> caches(2);
    for (auto& c : caches)
        c.keys = constant(xt::xtensor<double, 3>::from_shape({2, 6, 8})), c.values = constant(xt::xtensor<double, 3>::from_shape({2, 6, 8}));
    // the first 3 positions at once, then one at a time
    std::size_t at = 0;
    for (std::size_t n : {3, 1, 1, 1}) {
        Ids part = Ids::from_shape({2, n});
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t t = 0; t < n; ++t) part(b, t) = idx(b, at + t);
        for (auto& c : caches) c.before = at;
        const Var<double, 3> h = m.hidden(part, {}, nullptr, at, &caches);
        const Var<double, 3> logits = linear(h, m.lm_head.weight);
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t t = 0; t < n; ++t)
                for (std::size_t v = 0; v < 11; ++v) CHECK(logits.value()(b, t, v) == doctest::Approx(full.value()(b, at + t, v)).epsilon(1e-12));
        at += n;
    }
}

TEST_CASE("GPT generate: cached and recomputed sampling agree, past block_size too; top_k 1 is greedy") {
    const auto m = small_model(small_config(), 2);
    const Ids prompt{{1, 2, 3}, {4, 5, 6}};
    for (std::size_t new_tokens : {2, 9}) {  // 9: the window slides past block_size 6
        Generator g1(7), g2(7);
        const Ids cached = nn::generate(m, prompt, new_tokens, g1, {.temperature = 0.9});
        const Ids recomputed = nn::generate(m, prompt, new_tokens, g2, {.temperature = 0.9, .use_cache = false});
        REQUIRE(cached.shape()[1] == 3 + new_tokens);
        CHECK(cached == recomputed);
        for (std::size_t b = 0; b < 2; ++b)
            for (std::size_t t = 0; t < 3; ++t) CHECK(cached(b, t) == prompt(b, t));
    }
    // top_k = 1: each token is the argmax of the full forward's last logits
    Generator g(3);
    std::vector<std::size_t> streamed;
    const Ids greedy = nn::generate(m, Ids{{7, 7, 7, 7, 7, 7, 7, 2}}, 4, g,
                                    {.top_k = 1, .on_token = [&](std::size_t step, const std::vector<std::int64_t>& t) {
                                         CHECK(t.size() == 1);
                                         streamed.push_back(step);
                                     }});
    CHECK(streamed == std::vector<std::size_t>{0, 1, 2, 3});
    const NoGrad no_grad;
    for (std::size_t step = 0; step < 4; ++step) {
        const std::size_t len = 8 + step;
        Ids window = Ids::from_shape({1, 6});  // a prompt longer than block_size is cropped, as nanoGPT
        for (std::size_t t = 0; t < 6; ++t) window(0, t) = greedy(0, len - 6 + t);
        const auto logits = m(window);
        std::size_t best = 0;
        for (std::size_t v = 1; v < 11; ++v)
            if (logits.value()(0, 5, v) > logits.value()(0, 5, best)) best = v;
        CHECK(greedy(0, len) == std::int64_t(best));
    }
    CHECK_THROWS_AS(nn::generate(m, prompt, 1, g, {.temperature = -1}), value_error);
    CHECK_THROWS_AS(nn::generate(m, Ids::from_shape({2, 0}), 1, g), shape_error);
}

TEST_CASE("GPT generate: top_k keeps the k most likely tokens") {
    const auto m = small_model(small_config(), 4);
    const Ids prompt{{1, 2}};
    const NoGrad no_grad;
    const auto logits = m(prompt);
    std::vector<std::size_t> order(11);
    for (std::size_t v = 0; v < 11; ++v) order[v] = v;
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return logits.value()(0, 1, a) > logits.value()(0, 1, b); });
    Generator g(5);
    for (int draw = 0; draw < 50; ++draw) {
        const auto t = nn::generate(m, prompt, 1, g, {.temperature = 5, .top_k = 3})(0, 2);
        CHECK(std::find(order.begin(), order.begin() + 3, std::size_t(t)) != order.begin() + 3);
    }
}

TEST_CASE("GPT state dicts: Hugging Face's Conv1D layout loads transposed; a wrong causal buffer is refused") {
    auto m = small_model(small_config(), 6);
    auto sd = io::state_dict(m);
    std::map<std::string, io::NpyArray> hf;
    for (const auto& [k, a] : sd) {
        const bool conv1d = k.ends_with("c_attn.weight") || k.ends_with("c_proj.weight") || k.ends_with("c_fc.weight");
        hf[k] = conv1d ? io::NpyArray::from(xt::xtensor<double, 2>(xt::transpose(a.as<double, 2>()))) : a;
    }
    hf["transformer.h.0.attn.masked_bias"] = io::NpyArray::from(xt::xtensor<double, 0>(-1e4));
    auto fresh = small_model(small_config(), 7);
    const Ids idx{{1, 2, 3, 4}};
    io::load_gpt_state_dict(fresh, hf, "hf");
    const NoGrad no_grad;
    CHECK(fresh(idx).value() == m(idx).value());

    auto causal = xt::xtensor<double, 4>::from_shape({1, 1, 6, 6});
    for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t j = 0; j < 6; ++j) causal(0, 0, i, j) = j <= i;
    sd["transformer.h.1.attn.bias"] = io::NpyArray::from(causal);
    io::load_gpt_state_dict(fresh, sd, "nanogpt");  // accepted
    causal(0, 0, 2, 4) = 1;
    sd["transformer.h.1.attn.bias"] = io::NpyArray::from(causal);
    CHECK_THROWS_WITH_AS(io::load_gpt_state_dict(fresh, sd, "nanogpt"),
                         doctest::Contains("transformer.h.1.attn.bias of shape (1, 1, 6, 6) is not a causal mask"), io_error);
    sd.erase("transformer.h.1.attn.bias");
    sd.erase("transformer.ln_f.bias");
    CHECK_THROWS_WITH_AS(io::load_gpt_state_dict(fresh, sd, "nanogpt"), doctest::Contains("transformer.ln_f.bias"), io_error);
}

TEST_CASE("GPT llm.c files: the tensors in llm.c's order, written and read back") {
    const auto c = small_config(true, nn::GeluForm::tanh);
    auto m = small_model(c, 8);
    const auto path = std::filesystem::temp_directory_path() / "xgrad_test_llmc.bin";
    io::save_llmc(m, path, 9);  // a tokenizer of 9 tokens padded to 11
    const io::LlmcFile f = io::read_llmc(path);
    CHECK(f.vocab_size == 9);
    CHECK(f.config.vocab_size == 11);
    CHECK(f.config.n_layer == 2);
    CHECK(f.config.block_size == 6);
    CHECK(f.config.gelu == nn::GeluForm::tanh);
    // where llm.c reads them: wte, wpe, ln1w (L, C), ln1b, qkvw (L, 3C, C): layer 1's first qkv weight
    const std::size_t C = 8, L = 2, after_ln1 = 11 * C + 6 * C + 2 * L * C;
    CHECK(f.params[0] == float(m.transformer.wte.weight.value()(0, 0)));
    CHECK(f.params[11 * C] == float(m.transformer.wpe.weight.value()(0, 0)));
    CHECK(f.params[11 * C + 6 * C + C] == float(m.transformer.h[1].ln_1.weight.value()(0)));
    CHECK(f.params[after_ln1 + 3 * C * C + 1] == float(m.transformer.h[1].attn.c_attn.weight.value()(0, 1)));
    CHECK(f.params.back() == float(m.transformer.ln_f.bias.value()(C - 1)));
    Generator gen(9);
    nn::GPT<double> back(f.config, gen);
    io::load_llmc(back, f);
    const auto original = io::state_dict(m);
    for_each_parameter(back, [&](const std::string& name, const auto& p) {  // equal after rounding to float
        CAPTURE(name);
        const auto want = original.at(name).as_xarray<double>();
        const xt::xarray<double> rounded = xt::cast<double>(xt::cast<float>(want));
        CHECK(xt::xarray<double>(p.value()) == rounded);
    });
    // a corrupt file is one error naming it
    auto bytes = io::read_file_bytes(path);
    bytes.resize(bytes.size() - 4);
    io::write_file_atomic(path, bytes.data(), bytes.size());
    CHECK_THROWS_WITH_AS(io::read_llmc(path), doctest::Contains("xgrad_test_llmc.bin: holds"), io_error);
    std::filesystem::remove(path);
    CHECK_THROWS_AS(io::save_llmc(small_model(small_config(), 1), path, 9), value_error);  // erf GELU
}

TEST_CASE("optimizer groups: weight_decay_groups splits by dimension; groups override lr and weight_decay") {
    auto m = small_model(small_config(), 10);
    const auto groups = optim::weight_decay_groups(m, 0.1);
    REQUIRE(groups.size() == 2);
    for (const auto& p : groups[0].params) CHECK(p.shape.size() >= 2);
    for (const auto& p : groups[1].params) CHECK(p.shape.size() == 1);
    CHECK(groups[0].params.size() == 1 + 1 + 2 * 4);  // wte (tied with lm_head, once), wpe, 4 matrices per block
    CHECK(groups[1].params.size() == 2 * 8 + 2);

    // SGD: p -= lr_g · (grad + wd_g · p) per group
    Generator gen(1);
    nn::Linear<double> lin(1, 1, gen);
    lin.weight.value()(0, 0) = 1, lin.bias.value()(0) = 1;
    auto lin_groups = optim::weight_decay_groups(lin, 1.0);  // the weight decays by 1, the bias not
    lin_groups[0].lr = 0.5;
    optim::SGD sgd(std::move(lin_groups), {.lr = 0.1});
    backward(sum(lin(constant(xt::xtensor<double, 2>{{2.0}}))));  // d/dw = 2, d/db = 1
    sgd.step();
    CHECK(lin.weight.value()(0, 0) == doctest::Approx(1 - 0.5 * (2 + 1.0 * 1)));
    CHECK(lin.bias.value()(0) == doctest::Approx(1 - 0.1 * 1));
    sgd.set_lr(0.01);  // every group, as torch's schedules set param_group["lr"]
    CHECK(sgd.lr() == 0.01);
    CHECK(!sgd.group_of(0).lr);
    CHECK_THROWS_AS(optim::SGD<double>(std::vector<optim::ParamGroup<double>>{{{}, -1.0, {}}}, {.lr = 0.1}), value_error);
}

}  // namespace test_nn_gpt
