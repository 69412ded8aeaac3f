// A GPT given as nanoGPT's files (the folder format of `xgrad gpt`, commands/gpt.cpp; also read by
// `xgrad explore`):
//   IN/config.json  {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias": bool,
//                    "gelu": "erf" | "tanh"} (dropout 0)
//   IN/<name>.npy   every parameter under nanoGPT's state-dict names (float32 or float64, one dtype);
//                   buffers such as transformer.h.0.attn.bias.npy may be there (checked, not used)
//   IN/idx.npy, IN/targets.npy  int64 (B, T), T <= block_size; target -1 is ignored
// Or the model from a GPT-2 folder in Hugging Face's layout (io/gpt_folder.hpp, `xgrad gpt --model`),
// IN holding idx.npy and targets.npy only.
// Everything is read and checked first: bad input is an io_error naming the file or field.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <variant>

#include <xtensor/xtensor.hpp>

#include "xgrad/nn/gpt.hpp"

namespace xgrad::cli {

using GptModel = std::variant<nn::GPT<float>, nn::GPT<double>>;  // the parameters' dtype, loaded, eval mode

struct GptFiles {
    nn::GPTConfig config;
    xt::xtensor<std::int64_t, 2> idx, targets;
    GptModel model;
};

GptFiles read_gpt_files(const std::filesystem::path& in);
GptFiles read_gpt_files(const std::filesystem::path& in, const std::filesystem::path& model_dir);

// The parts: IN/config.json with the parameters, and one ids file IN/<name>.npy, int64 (B, T) with
// T <= block_size and every id in [0, vocab_size) (targets: -1 too).
std::pair<nn::GPTConfig, GptModel> read_gpt_model(const std::filesystem::path& in);
xt::xtensor<std::int64_t, 2> read_gpt_ids(const std::filesystem::path& in, const std::string& name,
                                          const nn::GPTConfig& c, bool targets);

}  // namespace xgrad::cli
