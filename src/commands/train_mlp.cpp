// `xgrad train mlp`: a two-hidden-layer MLP learns y = sin(3 x0) cos(2 x1) on [-1, 1]^2 with
// plain SGD on the tape — the demo until attention training exists.
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::cli {
namespace {

struct MlpOptions {
    int steps = 2000;
    int batch = 64;
    int hidden = 32;
    double lr = 0.1;
    unsigned seed = 1;
    int log_every = 200;
};

// PyTorch's nn.Linear default: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias.
xt::xtensor<float, 2> init_weight(std::size_t out, std::size_t in, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1 / std::sqrt(float(in)), 1 / std::sqrt(float(in)));
    auto w = xt::xtensor<float, 2>::from_shape({out, in});
    for (auto& v : w) v = u(rng);
    return w;
}
xt::xtensor<float, 1> init_bias(std::size_t out, std::size_t in, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> u(-1 / std::sqrt(float(in)), 1 / std::sqrt(float(in)));
    auto b = xt::xtensor<float, 1>::from_shape({out});
    for (auto& v : b) v = u(rng);
    return b;
}

int train_mlp(const MlpOptions& o) {
    std::mt19937_64 rng(o.seed);
    const std::size_t h = o.hidden;
    auto w1 = parameter(init_weight(h, 2, rng));
    auto b1 = parameter(init_bias(h, 2, rng));
    auto w2 = parameter(init_weight(h, h, rng));
    auto b2 = parameter(init_bias(h, h, rng));
    auto w3 = parameter(init_weight(1, h, rng));
    auto b3 = parameter(init_bias(1, h, rng));
    std::vector<Var<float, 2>> weights{w1, w2, w3};
    std::vector<Var<float, 1>> biases{b1, b2, b3};

    std::uniform_real_distribution<float> coord(-1, 1);
    auto x = xt::xtensor<float, 2>::from_shape({std::size_t(o.batch), 2});
    auto y = xt::xtensor<float, 2>::from_shape({std::size_t(o.batch), 1});
    const auto start = std::chrono::steady_clock::now();
    double first_loss = 0, smoothed = 0;
    fmt::print("training a 2-{}-{}-1 tanh MLP on y = sin(3 x0) cos(2 x1), batch {}, SGD lr {}\n", h, h, o.batch, o.lr);
    for (int step = 1; step <= o.steps; ++step) {
        for (std::size_t i = 0; i < x.shape(0); ++i) {
            x(i, 0) = coord(rng), x(i, 1) = coord(rng);
            y(i, 0) = std::sin(3 * x(i, 0)) * std::cos(2 * x(i, 1));
        }
        auto input = constant(x);
        auto target = constant(y);
        Var<float, 2> h1 = tanh(linear(input, w1, b1));
        Var<float, 2> h2 = tanh(linear(h1, w2, b2));
        auto loss = mean(square(linear(h2, w3, b3) - target));
        backward(loss, {.keep_intermediate_grads = false});
        for (auto& w : weights) w.value() -= float(o.lr) * w.grad(), w.zero_grad();
        for (auto& b : biases) b.value() -= float(o.lr) * b.grad(), b.zero_grad();
        tape().clear();

        const double l = loss.value()();
        if (step == 1) first_loss = smoothed = l;
        smoothed = 0.95 * smoothed + 0.05 * l;
        if (step % o.log_every == 0 || step == 1) fmt::print("step {:5d}  loss {:.5f}\n", step, smoothed);
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("loss fell from {:.5f} to {:.5f} in {} steps ({:.2f} s)\n", first_loss, smoothed, o.steps, secs);
    return smoothed < first_loss ? 0 : 1;
}

}  // namespace

void setup_train_mlp(CLI::App& mlp) {
    static MlpOptions o;
    mlp.add_option("--steps", o.steps, "training steps")->check(at_least(1));
    mlp.add_option("--batch", o.batch, "examples per step")->check(at_least(1));
    mlp.add_option("--hidden", o.hidden, "units per hidden layer")->check(at_least(1));
    mlp.add_option("--lr", o.lr, "learning rate")->check(positive());
    mlp.add_option("--seed", o.seed, "random seed");
    mlp.add_option("--log-every", o.log_every, "print the loss every N steps")->check(at_least(1));
    mlp.callback([] { selected_action() = [] { return train_mlp(o); }; });
}

}  // namespace xgrad::cli
