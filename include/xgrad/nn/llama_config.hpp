// nn::LlamaConfig: the sizes of nn::Llama (nn/llama.hpp) under llama2.c's ModelArgs names, apart
// from the model, so that a reader of configuration files needs nothing else.
#pragma once
#include <cstddef>
#include <optional>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::nn {

// The hidden size of a SwiGLU feed-forward for model width `dim` when none is given: Meta's and
// llama2.c's rule, 2/3 of 4·dim (times ffn_dim_multiplier when given), rounded up to a multiple
// of multiple_of. stories15M: dim 288, multiple_of 32 -> 768.
inline std::size_t swiglu_hidden_dim(std::size_t dim, std::size_t multiple_of,
                                     std::optional<double> ffn_dim_multiplier = std::nullopt) {
    if (multiple_of == 0) throw value_error("swiglu_hidden_dim: multiple_of must be positive");
    std::size_t hidden = 2 * (4 * dim) / 3;  // int(2 * hidden_dim / 3), hidden_dim = 4·dim
    if (ffn_dim_multiplier) {
        if (!(*ffn_dim_multiplier > 0))
            throw value_error("swiglu_hidden_dim: ffn_dim_multiplier must be positive, got " +
                              std::to_string(*ffn_dim_multiplier));
        hidden = std::size_t(*ffn_dim_multiplier * double(hidden));
    }
    return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

// llama2.c's ModelArgs (its defaults: Llama 2 7B), with Meta's ffn_dim_multiplier and rope_theta
// and the choice of an output layer tied to the embedding (model.py ties it).
struct LlamaConfig {
    std::size_t dim = 4096, n_layers = 32, n_heads = 32;
    std::optional<std::size_t> n_kv_heads{};  // grouped-query attention; default n_heads
    std::size_t vocab_size = 32000;
    std::optional<std::size_t> hidden_dim{};  // the feed-forward's; default swiglu_hidden_dim
    std::size_t multiple_of = 256;
    std::optional<double> ffn_dim_multiplier{};
    double norm_eps = 1e-5;
    std::size_t max_seq_len = 2048;  // the longest sequence (rotary positions)
    double dropout = 0;              // embedding, attention-weight, residual and feed-forward dropout
    double rope_theta = 10000;
    bool tie_embeddings = true;  // output.weight is tok_embeddings.weight

    std::size_t kv_heads() const { return n_kv_heads.value_or(n_heads); }
    std::size_t head_dim() const { return dim / n_heads; }
    std::size_t ffn_hidden() const { return hidden_dim.value_or(swiglu_hidden_dim(dim, multiple_of, ffn_dim_multiplier)); }
    void validate() const;  // value_error naming the field
};

inline void LlamaConfig::validate() const {
    auto need = [](bool ok, const std::string& what) {
        if (!ok) throw value_error("Llama: " + what);
    };
    need(dim > 0 && n_layers > 0 && n_heads > 0 && vocab_size > 0 && max_seq_len > 0 && multiple_of > 0,
         "dim, n_layers, n_heads, vocab_size, max_seq_len and multiple_of must be positive");
    need(dim % n_heads == 0, "dim " + std::to_string(dim) + " is not divisible by n_heads " + std::to_string(n_heads));
    need(head_dim() % 2 == 0, "the head size dim / n_heads = " + std::to_string(head_dim()) +
                                  " must be even (the rotary embedding turns pairs)");
    need(kv_heads() > 0 && n_heads % kv_heads() == 0,
         "n_kv_heads " + std::to_string(kv_heads()) + " does not divide n_heads " + std::to_string(n_heads));
    need(ffn_hidden() > 0, "hidden_dim must be positive");
    need(norm_eps >= 0, "norm_eps must be >= 0, got " + std::to_string(norm_eps));
    need(rope_theta > 0, "rope_theta must be positive, got " + std::to_string(rope_theta));
    need(dropout >= 0 && dropout < 1, "dropout must be in [0, 1), got " + std::to_string(dropout));
}

}  // namespace xgrad::nn
