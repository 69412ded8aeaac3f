// A Hugging Face Llama folder's config.json (LlamaConfig's names) as nn::LlamaConfig, and back; the
// rest of the folder: io/llama_folder.hpp.
#pragma once
#include <filesystem>
#include <string>

#include "xgrad/nn/llama_config.hpp"

namespace xgrad::io {

// config.json as nn::LlamaConfig: hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads (default: the heads), vocab_size,
// max_position_embeddings (2048), rms_norm_eps (1e-6), rope_theta (10000), tie_word_embeddings
// (false); model_type "llama", hidden_act "silu", no rope_scaling, no biases. `source` names it in
// errors (io_error naming the field).
nn::LlamaConfig parse_hf_llama_config(const std::string& text, const std::string& source);
nn::LlamaConfig read_hf_llama_config(const std::filesystem::path& config_json);
// The config.json parse_hf_llama_config reads back.
std::string hf_llama_config_json(const nn::LlamaConfig& c);
// Whether `dir` holds a config.json whose model_type is "llama".
bool is_llama_folder(const std::filesystem::path& dir);

}  // namespace xgrad::io
