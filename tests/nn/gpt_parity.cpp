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
#include "xgrad/ops/autocast.hpp"
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

// ‖ours − ref‖ / ‖ref‖ over a whole array.
template <class A>
double relative_norm_error(const A& ours, const io::NpyArray& ref_array) {
    const auto ref = ref_array.as_xarray<double>();
    double diff = 0, norm = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        diff += std::pow(double(ours.data()[i]) - ref.data()[i], 2);
        norm += ref.data()[i] * ref.data()[i];
    }
    return std::sqrt(diff / norm);
}

// Mixed precision against torch.autocast("cpu", dtype=torch.bfloat16) around nanoGPT's forward and
// loss (tests/fixtures/make_gpt.py), at bfloat16's tolerance (PyTorch's own for bf16: 1.6e-2). Both
// sides round matmul operands to bfloat16; PyTorch also rounds the matmuls' outputs, xgrad keeps them
// float32, so they differ by about one bfloat16 rounding. The float32 step of the same model shows
// that Autocast took effect: without it the gradients match nanoGPT's float32 ones to 1e-5.
TEST_CASE("nn::GPT under xgrad::Autocast matches nanoGPT under torch.autocast at bfloat16 tolerances") {
    if (const std::string why = bfloat16_unsupported(); !why.empty()) {
        MESSAGE("bfloat16 not tested on this machine: " << why);
        return;
    }
    const Case c("autocast_bf16");
    Generator gen(1);
    nn::GPT<float> model(c.config(), gen);
    io::load_gpt_state_dict(model, c.with_prefix("param."), "fixture autocast_bf16");
    const auto idx = c.ids("in.idx"), targets = c.ids("in.targets");
    double worst_bf16 = 0, least_shift = 1, worst_f32 = 0;
    for (const bool bf16 : {true, false}) {
        Var<float, 0> loss;
        {
            Autocast autocast(bf16 ? MatmulPrecision::bfloat16 : MatmulPrecision::float32);
            loss = nn::gpt_loss(model(idx), targets);
        }
        backward(loss);
        const std::string prefix = bf16 ? "" : "f32.";
        CHECK(loss.value()() == doctest::Approx(double(c.a.at(prefix + "out.loss").as_xarray<double>()())).epsilon(2e-3));
        for_each_parameter_name(model, [&](const std::string& pname, const auto& var) {
            CAPTURE(pname);
            const double err = relative_norm_error(var.grad(), c.a.at(prefix + "grad." + pname));
            if (bf16) {
                worst_bf16 = std::max(worst_bf16, err);
                // how far bfloat16 moved this gradient away from nanoGPT's float32 one
                least_shift = std::min(least_shift, relative_norm_error(var.grad(), c.a.at("f32.grad." + pname)));
            } else {
                worst_f32 = std::max(worst_f32, err);
            }
        });
        zero_grad(model);
        tape().clear();
    }
    MESSAGE("gradients, relative error: bfloat16 against torch.autocast " << worst_bf16
            << ", float32 against torch " << worst_f32 << "; bfloat16 moved every gradient by at least " << least_shift);
    CHECK(worst_bf16 < 1.6e-2);
    CHECK(worst_f32 < 1e-5);
    CHECK(least_shift > 10 * worst_f32);  // Autocast did round: far above float32's own differences
}

}  // namespace test_nn_gpt_parity
