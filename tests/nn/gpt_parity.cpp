// nn::GPT against nanoGPT's own model.py (tests/fixtures/make_gpt.py, float64): logits, loss and
// the gradient of every parameter, through io::load_gpt_state_dict (nanoGPT's names, its attn.bias
// buffers accepted), and three AdamW steps with nanoGPT's configure_optimizers groups.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include <doctest/doctest.h>

#include "support/fixtures.hpp"
#include "xgrad/io/gpt_formats.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/optim/adam.hpp"

namespace test_nn_gpt_parity {

using namespace xgrad;
using Arrays = std::map<std::string, io::NpyArray>;

struct Case {
    Arrays a;
    explicit Case(const std::string& name) : a(io::read_npz(std::string(XGRAD_FIXTURES) + "/gpt/" + name + ".npz")) {}
    std::size_t cfg(const std::string& field) const { return std::size_t(a.at("cfg." + field).as_xarray<double>()()); }
    nn::GPTConfig config() const {
        nn::GPTConfig c;
        c.n_layer = cfg("n_layer"), c.n_head = cfg("n_head"), c.n_embd = cfg("n_embd");
        c.block_size = cfg("block_size"), c.vocab_size = cfg("vocab_size");
        c.bias = cfg("bias") != 0, c.gelu = cfg("gelu") ? nn::GeluForm::tanh : nn::GeluForm::erf;
        return c;
    }
    Arrays with_prefix(const std::string& prefix) const {
        Arrays out;
        for (const auto& [k, v] : a)
            if (k.starts_with(prefix)) out[k.substr(prefix.size())] = v;
        return out;
    }
    xt::xtensor<std::int64_t, 2> ids(const std::string& key) const { return a.at(key).as<std::int64_t, 2>(); }
};

double worst = 0, worst_adamw = 0;

template <class A>
void check_close(const A& ours, const io::NpyArray& ref, const std::string& what) {
    testing::check_parity(ours, ref.as_xarray<double>(), what, worst);
}

TEST_CASE("nn::GPT matches nanoGPT's model.py: logits, loss, every gradient, AdamW with its decay groups") {
    for (const std::string name : {"bias_erf", "nobias_erf_full_block", "bias_tanh"}) {
        CAPTURE(name);
        const Case c(name);
        Generator gen(1);
        nn::GPT<double> model(c.config(), gen);
        io::load_gpt_state_dict(model, c.with_prefix("param."), "fixture " + name);
        CHECK(model.lm_head.weight.node() == model.transformer.wte.weight.node());  // still tied

        const auto idx = c.ids("in.idx"), targets = c.ids("in.targets");
        const Var<double, 3> logits = model(idx);
        const Var<double, 0> loss = nn::gpt_loss(logits, targets);
        check_close(logits.value(), c.a.at("out.logits"), name + " logits");
        check_close(loss.value(), c.a.at("out.loss"), name + " loss");
        backward(loss);
        for_each_parameter_name(model, [&](const std::string& pname, const auto& var) {
            CAPTURE(pname);
            REQUIRE(var.has_grad());
            check_close(var.grad(), c.a.at("grad." + pname), name + " grad " + pname);
        });

        optim::AdamW opt(optim::weight_decay_groups(model, 0.1), {.lr = 1e-3, .betas = {0.9, 0.95}});
        for (int step = 0; step < 3; ++step) {
            opt.zero_grad();
            backward(nn::gpt_loss(model(idx), targets));
            opt.step();
        }
        // The key bias's gradient is 0 in exact arithmetic (it shifts a whole score row) and rounding
        // noise (1e-17) in both programs; AdamW divides it by eps = 1e-8, so those entries move by
        // lr · noise / eps ~ 1e-12 differently: an absolute tolerance of 1e-11 after the steps.
        for_each_parameter_name(model, [&](const std::string& pname, const auto& var) {
            const auto ref = c.a.at("adamw." + pname).as_xarray<double>();
            for (std::size_t i = 0; i < ref.size(); ++i) {
                const double err = std::abs(var.value().data()[i] - ref.data()[i]);
                worst_adamw = std::max(worst_adamw, err);
                CHECK_MESSAGE(err <= 1e-11, name << " after AdamW " << pname << "[" << i << "]");
            }
        });
    }
    MESSAGE("worst relative error against nanoGPT: " << worst << "; after 3 AdamW steps, absolute: " << worst_adamw);
    CHECK(worst < 1e-12);
}

}  // namespace test_nn_gpt_parity
