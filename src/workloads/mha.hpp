// The reference workload of `xgrad bench` (the same step as bench/libtorch_mha.cpp, its libtorch
// peer, and the GEMMs of bench/gemm_compare.cpp): one MultiheadAttention training step is
//   self-attention on x (L, B, E) with a key_padding_mask ignoring the last L/4 keys of every
//   sequence, MSE loss against a fixed random target, backward, Adam(lr 1e-3), zero_grad.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>

#include "xgrad/check/random.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::bench {

struct MhaConfig {
    std::size_t batch = 2, seq = 6, embed = 100, heads = 5;  // B, L, E, H
    nn::AttentionPath path = nn::AttentionPath::automatic;   // `xgrad bench --attention`
};

// Useful floating-point operations of one step: the GEMMs only (softmax and Adam are O(L·S) and
// O(E²)). Forward: in-projection 6·LB·E², scores and context 4·B·L²·E, out-projection 2·LB·E².
// Backward: weight gradient of the in-projection (the input needs none) 6·LB·E², twice the
// attention and the out-projection (input and weight gradients).
inline double useful_flops(const MhaConfig& c) {
    const double rows = double(c.seq) * double(c.batch), e = double(c.embed);
    const double attention = 4.0 * double(c.batch) * double(c.seq) * double(c.seq) * e;
    return 12.0 * rows * e * e + 3.0 * attention + 3.0 * 2.0 * rows * e * e;
}

template <Real T>
class MhaWorkload {
public:
    explicit MhaWorkload(const MhaConfig& c, std::uint64_t seed = 0)
        : config_(c), init_(seed), mha_({.embed_dim = c.embed, .num_heads = c.heads}, init_),
          adam_(mha_, {.lr = 1e-3}) {
        const std::array<std::size_t, 3> shape{c.seq, c.batch, c.embed};
        x_ = constant(xt::xtensor<T, 3>(randn<3>(shape, seed + 1)));
        target_ = constant(xt::xtensor<T, 3>(randn<3>(shape, seed + 2)));
        xt::xarray<bool> pad = xt::zeros<bool>({c.batch, c.seq});
        for (std::size_t b = 0; b < c.batch; ++b)
            for (std::size_t j = c.seq - c.seq / 4; j < c.seq; ++j) pad(b, j) = true;
        options_.key_padding_mask = ignore_mask(std::move(pad));
        options_.need_weights = false;
        options_.path = c.path;
    }

    // The loss of this step's forward (before the update). `after_backward` runs between backward
    // and the update (`xgrad bench` under mpirun: the data-parallel gradient reduction).
    T step(const std::function<void()>& after_backward = {}) {
        adam_.zero_grad();
        const auto out = mha_.forward(x_, x_, x_, options_).output;
        const auto loss = mse_loss(out, target_);
        backward(loss, {.keep_intermediate_grads = false});
        if (after_backward) after_backward();
        adam_.step();
        const T value = loss.value()();
        tape().clear();
        return value;
    }

    nn::MultiheadAttention<T>& module() { return mha_; }
    const Var<T, 3>& input() const { return x_; }
    const Var<T, 3>& target() const { return target_; }
    const nn::MhaForwardOptions<T>& options() const { return options_; }

private:
    MhaConfig config_;
    Generator init_;
    nn::MultiheadAttention<T> mha_;
    optim::Adam<T> adam_;
    Var<T, 3> x_, target_;
    nn::MhaForwardOptions<T> options_;
};

}  // namespace xgrad::bench
