// What the commands share about a Llama (train llama, sample, export, tokenize): the config a
// `train llama` checkpoint records and loading a Llama from any file xgrad reads it from.
//
// A `train llama` checkpoint's config (io::CheckpointConfig, int64 by name): dim, n_layers, n_heads,
// n_kv_heads, vocab_size, hidden_dim, max_seq_len, tie_embeddings, dropout_ppm, norm_eps_f64 and
// rope_theta_f64 (a float64's bits) and its tokenizer (gpt_task::tokenizer_config).
#pragma once
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "tasks/gpt.hpp"
#include "xgrad/io/llama2c.hpp"
#include "xgrad/io/llama_folder.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::llama_task {

inline constexpr const char* command = "train llama";

inline io::CheckpointConfig checkpoint_config(const nn::LlamaConfig& c, const text::Tokenizer& tok) {
    io::CheckpointConfig out{{"dim", std::int64_t(c.dim)},
                             {"n_layers", std::int64_t(c.n_layers)},
                             {"n_heads", std::int64_t(c.n_heads)},
                             {"n_kv_heads", std::int64_t(c.kv_heads())},
                             {"vocab_size", std::int64_t(c.vocab_size)},
                             {"hidden_dim", std::int64_t(c.ffn_hidden())},
                             {"max_seq_len", std::int64_t(c.max_seq_len)},
                             {"tie_embeddings", c.tie_embeddings ? 1 : 0},
                             {"dropout_ppm", std::int64_t(c.dropout * 1e6 + 0.5)},
                             {"norm_eps_f64", std::bit_cast<std::int64_t>(c.norm_eps)},
                             {"rope_theta_f64", std::bit_cast<std::int64_t>(c.rope_theta)}};
    out.merge(gpt_task::tokenizer_config(tok));
    return out;
}

// Whether a checkpoint's config is a Llama's (a GPT's has n_layer, not n_layers).
inline bool is_llama_checkpoint(const io::CheckpointConfig& c) { return c.count("n_kv_heads") != 0; }

struct SavedLlama {
    nn::LlamaConfig config;
    text::Tokenizer tokenizer = text::Tokenizer::bytes();
};

// What checkpoint_config recorded; value_error naming `source` and the key when it does not hold a Llama.
inline SavedLlama saved_llama(const io::CheckpointConfig& c, const std::string& source) {
    const auto get = [&](const std::string& key) { return std::size_t(gpt_task::checkpoint_entry(c, key, source, command)); };
    SavedLlama m;
    nn::LlamaConfig& k = m.config;
    k.dim = get("dim"), k.n_layers = get("n_layers"), k.n_heads = get("n_heads"), k.n_kv_heads = get("n_kv_heads");
    k.vocab_size = get("vocab_size"), k.hidden_dim = get("hidden_dim"), k.max_seq_len = get("max_seq_len");
    k.tie_embeddings = get("tie_embeddings") != 0, k.dropout = double(get("dropout_ppm")) / 1e6;
    k.norm_eps = std::bit_cast<double>(std::int64_t(get("norm_eps_f64")));
    k.rope_theta = std::bit_cast<double>(std::int64_t(get("rope_theta_f64")));
    try {
        k.validate();
    } catch (const value_error& e) {
        throw value_error(source + ": " + e.what());
    }
    m.tokenizer = gpt_task::checkpoint_tokenizer(c, source, k.vocab_size, command);
    return m;
}

// Whether FILE is llama2.c's checkpoint: a .bin that does not start with llm.c's magic number.
inline bool is_llama2c(const std::filesystem::path& file) {
    if (file.extension() != ".bin") return false;
    std::int32_t first = 0;
    std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(&first), sizeof(first));
    return first != io::detail::llmc_magic;
}

// Whether `path` holds a Llama: a llama2.c .bin, a `train llama` checkpoint or a Llama folder.
inline bool is_llama(const std::filesystem::path& path) {
    if (std::filesystem::is_directory(path)) return io::is_llama_folder(path);
    return is_llama2c(path) || (path.extension() != ".bin" && is_llama_checkpoint(io::read_checkpoint_config(path)));
}

struct LoadedLlama {
    nn::Llama<float> model;
    std::optional<text::Tokenizer> tokenizer;  // none for a llama2.c .bin
    std::size_t usable_vocab = 0;
};

// A llama2.c checkpoint (.bin, the file run.c reads), a `train llama` checkpoint (.npz or .safetensors) or a folder in
// Hugging Face's layout (io/llama_folder.hpp), in eval mode.
inline LoadedLlama load_llama(const std::filesystem::path& path) {
    if (std::filesystem::is_directory(path)) {
        io::LlamaFolder<float> folder = io::open_llama_folder<float>(path);
        const std::size_t usable = folder.tokenizer.vocab_size();
        return {std::move(folder.model), std::move(folder.tokenizer), usable};
    }
    Generator gen(0);
    if (is_llama2c(path)) {
        const io::Llama2cFile f = io::read_llama2c(path);
        LoadedLlama out{nn::Llama<float>(f.config, gen), std::nullopt, f.config.vocab_size};
        io::load_llama2c(out.model, f);
        set_training(out.model, false);
        return out;
    }
    const SavedLlama saved = saved_llama(io::read_checkpoint_config(path), path.string());
    LoadedLlama out{nn::Llama<float>(saved.config, gen), saved.tokenizer, saved.tokenizer.vocab_size()};
    io::load_state_dict(out.model, path);
    set_training(out.model, false);
    return out;
}

}  // namespace xgrad::llama_task
