// A Llama in Hugging Face's folder layout (LlamaForCausalLM: Llama 2, TinyLlama, SmolLM, ...):
//
//   config.json        LlamaConfig's names: hidden_size, intermediate_size, num_hidden_layers,
//                      num_attention_heads, num_key_value_heads, vocab_size, max_position_embeddings,
//                      rms_norm_eps, rope_theta, tie_word_embeddings; hidden_act "silu", no
//                      rope_scaling, no attention or MLP biases
//   model.safetensors  LlamaForCausalLM's tensors (model.embed_tokens, model.layers.{i}.self_attn.
//                      q_proj/k_proj/v_proj/o_proj, mlp.gate_proj/up_proj/down_proj, input_layernorm,
//                      post_attention_layernorm, model.norm, lm_head), F32, F16, BF16 or F64; or
//                      model.safetensors.index.json and the shards its weight_map names
//   tokenizer.model    SentencePiece (text::Tokenizer::sentencepiece)
//
//   auto folder = io::open_llama_folder("TinyStories-15M/");  // LlamaFolder<float>: .model (eval), .tokenizer
//   io::save_llama_folder(model, tokenizer, "out/");          // the same layout, from any nn::Llama
//
// Hugging Face's conversion of Meta's weights orders the rows of q_proj and k_proj for its
// rotate-half rotary embedding (each head's first halves, then its second halves); nn::Llama keeps
// Meta's and llama2.c's order (each head's pairs 2i, 2i + 1). Reading permutes those rows back,
// writing permutes them again: the model computes the same either way. Every problem is an io_error
// naming the file and the field or tensor.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "xgrad/core/random.hpp"
#include "xgrad/io/gpt_folder.hpp"
#include "xgrad/io/llama_config_json.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::io {

// The folder's weights under nn::Llama's names (model.py's), q and k rows in Meta's order; the
// tied output's entry added when the folder has no lm_head. Not yet checked against the model.
std::map<std::string, NpyArray> read_hf_llama_weights(const std::filesystem::path& dir, const nn::LlamaConfig& c);
// A state dict of nn::Llama under Hugging Face's names and row order (the tied output left out).
std::map<std::string, NpyArray> hf_llama_weights(const std::map<std::string, NpyArray>& state_dict,
                                                 const nn::LlamaConfig& c);

template <Real T = float>
struct LlamaFolder {
    nn::Llama<T> model;  // eval mode
    text::Tokenizer tokenizer;
};

// Everything of the folder, read and checked before the model is built.
template <Real T = float>
LlamaFolder<T> open_llama_folder(const std::filesystem::path& dir) {
    const nn::LlamaConfig config = read_hf_llama_config(dir / "config.json");
    std::error_code ec;
    const bool characters = std::filesystem::exists(dir / xgrad_tokenizer_file, ec);  // or bytes
    if (!characters && !std::filesystem::exists(dir / sentencepiece_file, ec))
        throw io_error(dir.string() + ": has no tokenizer.model (a SentencePiece model) or " + xgrad_tokenizer_file +
                       " (characters or bytes), which a Llama folder needs here");
    text::Tokenizer tokenizer = read_folder_tokenizer(dir);
    if (tokenizer.vocab_size() > config.vocab_size)
        throw io_error((dir / (characters ? xgrad_tokenizer_file : sentencepiece_file)).string() + ": " +
                       std::to_string(tokenizer.vocab_size()) + " tokens, more than config.json's vocab_size " +
                       std::to_string(config.vocab_size));
    const auto weights = read_hf_llama_weights(dir, config);
    Generator gen(0);
    LlamaFolder<T> out{nn::Llama<T>(config, gen), std::move(tokenizer)};
    load_state_dict(out.model, weights, {.convert_dtype = true}, dir.string());
    set_training(out.model, false);
    return out;
}

// The model as such a folder: config.json, model.safetensors (in the model's dtype) and the
// tokenizer's file (tokenizer.model, or xgrad_tokenizer.json for bytes and characters).
template <Real T>
void save_llama_folder(const nn::Llama<T>& model, const text::Tokenizer& tok, const std::filesystem::path& dir) {
    if (tok.vocab_size() > model.config.vocab_size)
        throw value_error("save_llama_folder: " + dir.string() + ": the tokenizer's " + std::to_string(tok.vocab_size()) +
                          " tokens do not fit the model's vocab_size " + std::to_string(model.config.vocab_size));
    write_safetensors(dir / "model.safetensors", hf_llama_weights(state_dict(model), model.config),
                      {.metadata = {{"format", "pt"}}});
    write_folder_tokenizer(dir, tok);
    const std::string config = hf_llama_config_json(model.config);
    write_file_atomic(dir / "config.json", config.data(), config.size());
}

}  // namespace xgrad::io
