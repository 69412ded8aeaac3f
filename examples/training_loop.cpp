// The README's training loop: causal self-attention learns to output the running mean of its
// inputs, y_i = mean(x_0 .. x_i), which it can do exactly with uniform weights over the prefix.
#include <iostream>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

struct Model {
    BOOST_HANA_DEFINE_STRUCT(Model, (nn::MultiheadAttention<float>, attn), (nn::Linear<float>, head));
};

// x (L, B, E) standard normal, and its running mean over the sequence axis
std::pair<xt::xtensor<float, 3>, xt::xtensor<float, 3>> make_batch(Generator& gen) {
    xt::xtensor<float, 3> x({8, 16, 16}), y({8, 16, 16});
    for (auto& v : x) v = float(gen.normal());
    for (std::size_t i = 0; i < 8; ++i)
        for (std::size_t j = 0; j < 16 * 16; ++j)
            y.data()[i * 256 + j] = i == 0 ? x.data()[j] : (i * y.data()[(i - 1) * 256 + j] + x.data()[i * 256 + j]) / float(i + 1);
    return {x, y};
}

int main() {
    Generator gen(1);
    Model model{nn::MultiheadAttention<float>({.embed_dim = 16, .num_heads = 2}, gen), nn::Linear<float>(16, 16, gen)};
    optim::Adam<float> opt(model, {.lr = 1e-2});
    nn::MhaForwardOptions<float> causal;
    causal.is_causal = true, causal.need_weights = false;

    float first = 0, last = 0;
    for (int step = 0; step <= 400; ++step) {
        auto [xv, yv] = make_batch(gen);
        auto x = constant(xv), y = constant(yv);
        auto h = model.attn.forward(x, x, x, causal).output;  // (L, B, E)
        auto loss = mse_loss(model.head(h), y);
        opt.zero_grad();
        backward(loss, {.keep_intermediate_grads = false});
        opt.step();
        if (step % 100 == 0) std::cout << "step " << step << "  loss " << loss.value()() << '\n';
        (step == 0 ? first : last) = loss.value()();
        tape().clear();  // end of step: the next one reuses the nodes
    }
    return last < first / 20 ? 0 : 1;
}
