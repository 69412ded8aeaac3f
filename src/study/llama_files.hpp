// A Llama given as llama2.c's files (the folder format of `xgrad llama`, commands/gpt.cpp):
//   IN/config.json  llama2.c's ModelArgs: {"dim", "n_layers", "n_heads", "vocab_size", "multiple_of",
//                   "norm_eps", "max_seq_len"} and optionally "n_kv_heads", "hidden_dim" (integers or
//                   null), "dropout" (0)
//   IN/<name>.npy   every parameter under model.py's state-dict names (float32 or float64, one
//                   dtype), the tied output.weight and tok_embeddings.weight both (equal)
//   IN/idx.npy, IN/targets.npy  int64 (B, T), T <= max_seq_len; target -1 is ignored
// Everything is read and checked first: bad input is an io_error naming the file or field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <variant>

#include <xtensor/xtensor.hpp>

#include "xgrad/nn/llama.hpp"

namespace xgrad::cli {

using LlamaModel = std::variant<nn::Llama<float>, nn::Llama<double>>;  // the parameters' dtype, loaded, eval mode

struct LlamaFiles {
    nn::LlamaConfig config;
    xt::xtensor<std::int64_t, 2> idx, targets;
    LlamaModel model;
};

LlamaFiles read_llama_files(const std::filesystem::path& in);

}  // namespace xgrad::cli
