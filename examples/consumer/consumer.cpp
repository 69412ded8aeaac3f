// Uses the installed headers and libxgrad: twenty Adam steps of a MultiheadAttention towards a
// zero output. Prints the first and the last loss, and whether libxgrad's compiled code was used
// (XGRAD_PRECOMPILED: the program is compiled for the library's SIMD level); exits 0 when the
// loss fell.
#include <cmath>
#include <cstdio>

#include <xgrad/xgrad.hpp>

int main() {
    using namespace xgrad;
    Generator gen(3);
    nn::MultiheadAttention<double> mha({.embed_dim = 8, .num_heads = 2}, gen);
    optim::Adam adam(mha, {.lr = 1e-2});
    xt::xtensor<double, 3> input = xt::zeros<double>({5, 2, 8});  // (L, N, E)
    for (std::size_t i = 0; i < input.size(); ++i) input.data()[i] = std::sin(0.7 * double(i));
    const auto x = constant(input);
    const auto target = xt::xtensor<double, 3>(xt::zeros<double>({5, 2, 8}));
    double first = 0, last = 0;
    for (int step = 0; step < 20; ++step) {
        auto loss = mse_loss(mha.forward(x, x, x).output, constant(target));
        (step == 0 ? first : last) = loss.value()();
        backward(loss);
        adam.step();
        adam.zero_grad();
        tape().clear();
    }
    std::printf("loss %.6f -> %.6f\n", first, last);
    std::printf("libxgrad's compiled code: %s\n", XGRAD_PRECOMPILED ? "used" : "not used");
    return last < first ? 0 : 1;
}
