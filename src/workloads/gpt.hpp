// The GPT workload of `xgrad bench --model gpt`, the same step as its peers: nanoGPT's model.py
// under PyTorch (nanogpt_step.py of the shared peers) and llm.c's train_gpt2.c. A GPT of
// `layers` blocks, `heads` heads, width `embed`, vocabulary `vocab`, biases, block_size max(T, 64),
// dropout 0; fixed random tokens idx and targets (B, T); forward, nanoGPT's cross-entropy,
// backward, AdamW(lr 1e-4, weight_decay 0.1) on every parameter (the peer's
// torch.optim.AdamW(m.parameters(), ...)), zero_grad.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <utility>

#include "xgrad/nn/gpt.hpp"
#include "xgrad/optim/adam.hpp"

namespace xgrad::bench {

// idx and targets (B, T): ids drawn uniformly from [0, vocab) by a generator of `seed`.
inline std::pair<xt::xtensor<std::int64_t, 2>, xt::xtensor<std::int64_t, 2>> random_tokens(std::size_t batch,
                                                                                            std::size_t seq,
                                                                                            std::size_t vocab,
                                                                                            std::uint64_t seed) {
    auto idx = xt::xtensor<std::int64_t, 2>::from_shape({batch, seq}), targets = idx;
    Generator tokens(seed);
    for (auto& t : idx) t = std::int64_t(tokens.uniform() * double(vocab));
    for (auto& t : targets) t = std::int64_t(tokens.uniform() * double(vocab));
    return {std::move(idx), std::move(targets)};
}

// One training step: loss() (the model's loss, lm_head and the cross-entropy fused), backward
// giving gradients back, after_backward (under mpirun: the gradient reduction), the update,
// zero_grad; returns the loss before the update.
template <Real T, class Loss>
T train_step(const Loss& loss_of, optim::Optimizer<T>& optimizer, const std::function<void()>& after_backward) {
    const Var<T, 0> loss = loss_of();
    backward(loss, {.keep_intermediate_grads = false});
    if (after_backward) after_backward();
    optimizer.step();
    optimizer.zero_grad();
    const T value = loss.value()();
    tape().clear();
    return value;
}

struct GptConfig {
    std::size_t layers = 12, heads = 12, embed = 768, vocab = 50257, batch = 4, seq = 64;
    nn::AttentionPath path = nn::AttentionPath::automatic;  // `xgrad bench --attention`
};

template <Real T>
class GptWorkload {
public:
    explicit GptWorkload(const GptConfig& c, std::uint64_t seed = 0)
        : init_(seed), model_(config(c), init_), adamw_(model_, {.lr = 1e-4, .weight_decay = 0.1}), path_(c.path) {
        std::tie(idx_, targets_) = random_tokens(c.batch, c.seq, c.vocab, seed + 1);
    }

    // The loss of this step's forward (before the update); `after_backward` runs between backward
    // and the update (under mpirun: the gradient reduction).
    T step(const std::function<void()>& after_backward = {}) {
        return train_step<T>([&] { return model_.loss(idx_, targets_, {.path = path_}); }, adamw_, after_backward);
    }
    nn::GPT<T>& module() { return model_; }

    // 6·N·B·T + the attention's 12·L·C·T per token (nanoGPT's estimate_mfu, N without wpe): one step's FLOP.
    double flops() const {
        const auto& c = model_.config;
        const double tokens = double(idx_.size()), N = double(model_.num_params());
        return 6 * N * tokens + 12.0 * double(c.n_layer) * double(c.n_embd) * double(idx_.shape()[1]) * tokens;
    }

private:
    static nn::GPTConfig config(const GptConfig& c) {
        return {.n_layer = c.layers, .n_head = c.heads, .n_embd = c.embed, .block_size = std::max<std::size_t>(c.seq, 64),
                .vocab_size = c.vocab, .dropout = 0, .bias = true, .gelu = nn::GeluForm::erf};
    }
    Generator init_;
    nn::GPT<T> model_;
    optim::AdamW<T> adamw_;
    xt::xtensor<std::int64_t, 2> idx_, targets_;
    nn::AttentionPath path_;
};

}  // namespace xgrad::bench
