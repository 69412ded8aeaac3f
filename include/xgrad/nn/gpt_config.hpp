// nn::GPTConfig: the sizes and choices of nn::GPT (nn/gpt.hpp), apart from the model, so that a
// reader of configuration files (io/gpt2_config.hpp) needs nothing else.
#pragma once
#include <cstddef>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::nn {

// nanoGPT's nn.GELU() is the erf form; GPT-2 and llm.c use the tanh form.
enum class GeluForm { erf, tanh };

// nanoGPT's GPTConfig (its defaults: GPT-2 124M with the vocabulary padded to 50304).
struct GPTConfig {
    std::size_t n_layer = 12, n_head = 12, n_embd = 768;
    std::size_t block_size = 1024;  // the longest sequence (positions)
    std::size_t vocab_size = 50304;
    double dropout = 0;  // embedding, attention-weight, residual and MLP dropout
    bool bias = true;    // biases in the Linears and LayerNorms
    GeluForm gelu = GeluForm::erf;

    void validate() const;  // value_error naming the field
};

inline void GPTConfig::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw value_error("GPT: " + what);
    };
    need(n_layer > 0 && n_head > 0 && n_embd > 0 && block_size > 0 && vocab_size > 0,
         "n_layer, n_head, n_embd, block_size and vocab_size must be positive");
    need(n_embd % n_head == 0,
         "n_embd " + std::to_string(n_embd) + " is not divisible by n_head " + std::to_string(n_head));
    need(dropout >= 0 && dropout < 1, "dropout must be in [0, 1), got " + std::to_string(dropout));
}

}  // namespace xgrad::nn
