// The multi-layer workload of `xgrad bench --layers N`: a small Transformer-shaped training step
// built from existing modules, for measuring what the single-MultiheadAttention workload
// (mha_workload.hpp) cannot: many small ops in a row, as in a 3+3-layer DETR-style model.
//   N post-norm blocks at d_model E on x (L, B, E), each
//     h = LayerNorm(x + MultiheadAttention(x, x, x))        (self-attention, key padding as mha_workload)
//     x = LayerNorm(h + Linear(4E, E)(relu(Linear(E, 4E)(h))))
//   then MSE loss against a fixed random target, backward, Adam(lr 1e-3), zero_grad.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "mha_workload.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::bench {

template <Real T>
struct StackBlock {
    BOOST_HANA_DEFINE_STRUCT(StackBlock, (nn::MultiheadAttention<T>, attention), (nn::LayerNorm<T>, norm1),
                             (nn::Linear<T>, expand), (nn::Linear<T>, contract), (nn::LayerNorm<T>, norm2));
    StackBlock() = default;
    StackBlock(std::size_t embed, std::size_t heads, Generator& gen)
        : attention({.embed_dim = embed, .num_heads = heads}, gen), norm1(embed), expand(embed, 4 * embed, gen),
          contract(4 * embed, embed, gen), norm2(embed) {}
};

template <Real T>
struct Stack {
    BOOST_HANA_DEFINE_STRUCT(Stack, (std::vector<StackBlock<T>>, blocks));
};

// Useful flops of one step: per block, the attention's (useful_flops) plus the feed-forward's two
// GEMMs (rows · E · 4E each, ·2 flops) forward, twice that backward.
inline double stack_useful_flops(const MhaConfig& c, std::size_t layers) {
    const double rows = double(c.seq) * double(c.batch), e = double(c.embed);
    return double(layers) * (useful_flops(c) + 3.0 * 2.0 * 2.0 * rows * e * 4.0 * e);
}

template <Real T>
class StackWorkload {
public:
    StackWorkload(const MhaConfig& c, std::size_t layers, std::uint64_t seed = 0) : init_(seed), data_(c, seed) {
        for (std::size_t i = 0; i < layers; ++i) model_.blocks.emplace_back(c.embed, c.heads, init_);
        adam_.emplace(model_, optim::AdamOptions{.lr = 1e-3});
    }

    // The loss of this step's forward (before the update).
    T step() {
        adam_->zero_grad();
        Var<T, 3> x = data_.x;
        for (const auto& block : model_.blocks) {
            const Var<T, 3> attended = x + block.attention.forward(x, x, x, data_.options).output;
            const Var<T, 3> h = block.norm1(attended);
            const Var<T, 3> hidden = relu(block.expand(h));
            const Var<T, 3> fed = h + block.contract(hidden);
            x = block.norm2(fed);
        }
        const auto loss = mse_loss(x, data_.target);
        backward(loss);
        adam_->step();
        const T value = loss.value()();
        tape().clear();
        return value;
    }

private:
    Generator init_;
    Stack<T> model_;
    std::optional<optim::Adam<T>> adam_;  // made once the blocks exist
    WorkloadData<T> data_;
};

}  // namespace xgrad::bench
