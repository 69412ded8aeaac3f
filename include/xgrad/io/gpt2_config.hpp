// A Hugging Face GPT-2 folder's config.json (GPT2Config's names) as nn::GPTConfig, and back; the
// rest of the folder: io/gpt_folder.hpp.
#pragma once
#include <filesystem>
#include <string>

#include "xgrad/nn/gpt_config.hpp"

namespace xgrad::io {

// config.json as nn::GPTConfig (block_size = n_positions, bias true, dropout 0). A "bias": false
// field (nanoGPT's option, which xgrad writes for models without biases) is read too.
nn::GPTConfig read_gpt2_config(const std::filesystem::path& config_json);
nn::GPTConfig parse_gpt2_config(const std::string& json_text, const std::string& source);

// config.json's text for `c`: GPT2Config's names, "activation_function" "gelu_new" (tanh) or "gelu"
// (erf), and "bias": false for a model without biases (which Hugging Face's GPT-2 cannot load).
std::string gpt2_config_json(const nn::GPTConfig& c);

}  // namespace xgrad::io
