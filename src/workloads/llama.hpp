// The Llama workload of `xgrad bench --model llama`, the step of its peer: llama2.c's model.py
// under PyTorch (llama2c_step.py of the shared peers). A Llama of `layers` layers, `heads` query
// heads over `kv_heads` key/value heads, width `dim`, vocabulary `vocab`, multiple_of 32,
// max_seq_len T, dropout 0, the output tied; fixed random tokens idx and targets (B, T); forward,
// model.py's cross-entropy, backward, AdamW(lr 5e-4, betas (0.9, 0.95)) with model.py's
// configure_optimizers groups (weight decay 0.1 on the >= 2-D parameters), zero_grad.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>

#include "workloads/gpt.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::bench {

struct LlamaConfig {
    std::size_t layers = 6, heads = 6, kv_heads = 6, dim = 288, vocab = 32000, batch = 4, seq = 256;
    nn::AttentionPath path = nn::AttentionPath::automatic;  // `xgrad bench --attention`
};

template <Real T>
class LlamaWorkload {
public:
    explicit LlamaWorkload(const LlamaConfig& c, std::uint64_t seed = 0)
        : init_(seed),
          model_(nn::LlamaConfig{.dim = c.dim, .n_layers = c.layers, .n_heads = c.heads, .n_kv_heads = c.kv_heads,
                                 .vocab_size = c.vocab, .multiple_of = 32, .max_seq_len = c.seq},
                 init_),
          adamw_(optim::weight_decay_groups(model_, 0.1), {.lr = 5e-4, .betas = {0.9, 0.95}}),
          path_(c.path) {
        std::tie(idx_, targets_) = random_tokens(c.batch, c.seq, c.vocab, seed + 1);
    }

    T step(const std::function<void()>& after_backward = {}) {
        return train_step<T>([&] { return model_.loss(idx_, targets_, {.path = path_}); }, adamw_, after_backward);
    }
    nn::Llama<T>& module() { return model_; }

    // 6·N·B·T + the attention's 12·L·dim·T per token (model.py's estimate_mfu): one step's FLOP.
    double flops() const {
        const auto& c = model_.config;
        const double tokens = double(idx_.size()), N = double(model_.num_params());
        return 6 * N * tokens + 12.0 * double(c.n_layers) * double(c.dim) * double(idx_.shape()[1]) * tokens;
    }

private:
    Generator init_;
    nn::Llama<T> model_;
    optim::AdamW<T> adamw_;
    xt::xtensor<std::int64_t, 2> idx_, targets_;
    nn::AttentionPath path_;
};

}  // namespace xgrad::bench
