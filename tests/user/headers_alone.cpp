// A user's training loop that includes only the headers it uses (docs/api.md, "Headers"), not
// xgrad/xgrad.hpp: each header brings what it needs, and libxgrad's compiled code with it.
#include <cstdio>

#include <xgrad/nn/linear.hpp>
#include <xgrad/nn/multihead_attention.hpp>
#include <xgrad/ops/loss.hpp>
#include <xgrad/optim/adam.hpp>

using namespace xgrad;

struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (nn::MultiheadAttention<float>, attn), (nn::Linear<float>, head));
};

int main() {
    Generator gen(1);
    Model model{nn::MultiheadAttention<float>({.embed_dim = 16, .num_heads = 2}, gen), nn::Linear<float>(16, 16, gen)};
    optim::Adam<float> opt(model, {.lr = 1e-2});
    xt::xtensor<float, 3> x_value({8, 4, 16});
    for (auto& v : x_value) v = float(gen.normal());
    float first = 0, last = 0;
    for (int step = 0; step < 50; ++step) {  // learn the identity
        const auto x = constant(x_value);
        const auto loss = mse_loss(model.head(model.attn.forward(x, x, x).output), x);
        opt.zero_grad();
        backward(loss);
        opt.step();
        (step == 0 ? first : last) = loss.value()();
        tape().clear();
    }
    std::printf("libxgrad's compiled code %s; loss %g -> %g\n", XGRAD_PRECOMPILED ? "used" : "not used", first, last);
    return last < first / 2 ? 0 : 1;
}
