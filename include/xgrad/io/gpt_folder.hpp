// A GPT-2 in Hugging Face's folder layout, the form the published GPT-2 models (124M to 1.5B) take:
//
//   config.json        GPT2Config's names: n_layer, n_head, n_embd, n_positions, vocab_size,
//                      layer_norm_epsilon, activation_function ("gelu_new": the tanh form)
//   model.safetensors  GPT2Model's tensors (wte.weight, h.0.attn.c_attn.weight, ...), with or
//                      without GPT2LMHeadModel's "transformer." prefix; c_attn, c_proj and c_fc
//                      weights in Conv1D's (in, out) layout; lm_head.weight absent (tied to wte)
//                      or equal to wte; attn.bias / attn.masked_bias buffers ignored
//   vocab.json + merges.txt   GPT-2's byte-level BPE (text::Tokenizer::bpe_folder), or for xgrad's
//                      byte and character tokenizers xgrad_tokenizer.json:
//                      {"version": 1, "kind": "byte"} or {"version": 1, "kind": "character",
//                      "characters": "\n !,..."} (the vocabulary in id order, increasing code points)
//
//   io::save_gpt_folder(model, tokenizer, "out/");     // the same layout, from any nn::GPT
//   auto gpt2 = io::open_gpt_folder("gpt2/");          // GptFolder<float>: .model (eval mode), .tokenizer
//   auto ids = gpt2.tokenizer.encode("Hello");
//   auto logits = gpt2.model(prompt);                  // as GPT2LMHeadModel's, in float32
//   nn::GPTConfig c = io::read_gpt2_config("gpt2/config.json");
//
// The tensors are mapped onto nn::GPT through io::load_gpt_state_dict (gpt_formats.hpp), which
// transposes the Conv1D weights. Every problem is an io_error naming the file and the field or
// tensor: a missing file, a config field missing, of the wrong JSON type or of a value nn::GPT
// cannot represent (an activation other than the GELUs, layer_norm_epsilon other than 1e-5, ...),
// a tensor missing, unexpected or of the wrong shape for the config, broken tokenizer files.
#pragma once
#include <filesystem>
#include <map>
#include <string>

#include "xgrad/io/gpt2_config.hpp"
#include "xgrad/io/gpt_formats.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace xgrad::io {

// The tensors of a GPT-2 model.safetensors under nanoGPT's names ("transformer." added where
// absent, lm_head.weight = wte.weight when absent), each checked against the shape `config` gives
// it in Hugging Face's layout; ready for load_gpt_state_dict.
std::map<std::string, NpyArray> read_gpt2_safetensors(const std::filesystem::path& path, const nn::GPTConfig& config);

// A folder's tokenizer, checked to fit `config` (no id past vocab_size).
text::Tokenizer read_gpt2_tokenizer(const std::filesystem::path& dir, const nn::GPTConfig& config);

// The file of xgrad's byte and character tokenizers in a folder (not Hugging Face's tokenizer.json,
// which GPT-2's published folders also hold, in another format).
inline constexpr const char* xgrad_tokenizer_file = "xgrad_tokenizer.json";
// A SentencePiece model's file in a folder (Llama's and llama2.c's name).
inline constexpr const char* sentencepiece_file = "tokenizer.model";
// A folder's tokenizer: xgrad_tokenizer.json when it has one, else tokenizer.model, else GPT-2's
// BPE files.
text::Tokenizer read_folder_tokenizer(const std::filesystem::path& dir);
// `tok` into the folder `dir` (each file written atomically): xgrad_tokenizer.json, tokenizer.model
// for SentencePiece, or for BPE vocab.json and merges.txt.
void write_folder_tokenizer(const std::filesystem::path& dir, const text::Tokenizer& tok);
// Whether `dir` looks like such a folder (it has config.json and model.safetensors).
bool is_gpt_folder(const std::filesystem::path& dir);

template <Real T = float>
struct GptFolder {
    nn::GPT<T> model;  // eval mode
    text::Tokenizer tokenizer;
};

// Everything of the folder, read and checked before the model is built.
template <Real T = float>
GptFolder<T> open_gpt_folder(const std::filesystem::path& dir) {
    const nn::GPTConfig config = read_gpt2_config(dir / "config.json");
    text::Tokenizer tokenizer = read_gpt2_tokenizer(dir, config);
    const auto weights = dir / "model.safetensors";
    const auto arrays = read_gpt2_safetensors(weights, config);
    Generator gen(0);
    GptFolder<T> out{nn::GPT<T>(config, gen), std::move(tokenizer)};
    load_gpt_state_dict(out.model, arrays, weights.string());
    set_training(out.model, false);
    return out;
}

// The folder layout above, written into the existing folder `dir` (each file atomically): what
// open_gpt_folder reads back, weights and tokenizer bit for bit.
template <Real T>
void save_gpt_folder(const nn::GPT<T>& model, const text::Tokenizer& tok, const std::filesystem::path& dir) {
    if (tok.vocab_size() > model.config.vocab_size)
        throw value_error("save_gpt_folder: " + dir.string() + ": the tokenizer's " + std::to_string(tok.vocab_size()) +
                          " tokens do not fit the model's vocab_size " + std::to_string(model.config.vocab_size));
    const std::string config = gpt2_config_json(model.config);
    write_safetensors(dir / "model.safetensors", gpt_state_dict_hf(model), {.metadata = {{"format", "pt"}}});
    write_folder_tokenizer(dir, tok);
    write_file_atomic(dir / "config.json", config.data(), config.size());
}

}  // namespace xgrad::io
