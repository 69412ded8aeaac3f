// What the GPT commands share (train gpt, sample, heads on a GPT): the default corpus, the model
// and tokenizer a checkpoint records, and loading a model from any file or folder they accept.
//
// A `train gpt` checkpoint's config (io::CheckpointConfig, int64 by name): n_layer, n_head, n_embd,
// block_size, vocab_size, bias, gelu (0 erf, 1 tanh), dropout_ppm and its tokenizer (tokenizer_config).
#pragma once
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "study/plot.hpp"
#include "xgrad/core/tape.hpp"
#include "xgrad/io/checkpoint.hpp"
#include "xgrad/io/gpt_folder.hpp"
#include "xgrad/io/gpt_formats.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/text/corpus.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace xgrad::gpt_task {

// The fortunes package's files (Debian's `fortunes`: quotations, jokes and poems, about 2.5 MB of
// English text), in name order, concatenated.
inline const char* const fortunes_dir = "/usr/share/games/fortunes";

inline text::Corpus default_corpus() {
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(fortunes_dir, ec))
        if (entry.is_regular_file() && !entry.is_symlink() && !entry.path().has_extension()) files.push_back(entry.path());
    if (ec || files.empty())
        throw io_error(std::string(fortunes_dir) +
                       ": the default corpus is missing (install Debian's fortunes package, or give --text FILE)");
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) {
        const auto bytes = io::read_file_bytes(f);
        all.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    }
    return text::Corpus::from_string(std::move(all), std::string(fortunes_dir) + " (" + std::to_string(files.size()) +
                                                          " files of the fortunes package)");
}

// What a checkpoint records of its tokenizer: tokenizer (0 bytes, 1 characters, 2 GPT-2's BPE, 3
// SentencePiece; the last two's files are in the checkpoint's folder: io::write_folder_tokenizer)
// and for characters vocab.<id> = the code point of character id.
inline io::CheckpointConfig tokenizer_config(const text::Tokenizer& tok) {
    using Kind = text::Tokenizer::Kind;
    const Kind kind = tok.kind();
    io::CheckpointConfig out{{"tokenizer", kind == Kind::sentencepiece ? 3
                                           : kind == Kind::bpe       ? 2
                                           : kind == Kind::character ? 1
                                                                     : 0}};
    for (std::size_t i = 0; i < tok.vocabulary().size(); ++i) out["vocab." + std::to_string(i)] = tok.vocabulary()[i];
    return out;
}

// The value of `key` in a checkpoint's config; value_error naming `source` and the key when it is
// missing or negative (`command` wrote such checkpoints).
inline std::int64_t checkpoint_entry(const io::CheckpointConfig& c, const std::string& key, const std::string& source,
                                     const char* command) {
    const auto it = c.find(key);
    if (it == c.end() || it->second < 0)
        throw value_error(source + ": not a `" + command + "` checkpoint (its config has no valid " + key + ")");
    return it->second;
}

// The tokenizer tokenizer_config recorded; value_error naming `source` when it does not fit
// `vocab_size`.
inline text::Tokenizer checkpoint_tokenizer(const io::CheckpointConfig& c, const std::string& source,
                                            std::size_t vocab_size, const char* command) {
    const std::int64_t kind = checkpoint_entry(c, "tokenizer", source, command);
    text::Tokenizer tok = text::Tokenizer::bytes();
    if (kind == 2 || kind == 3) {  // the files written beside the checkpoint
        const std::filesystem::path dir = std::filesystem::path(source).parent_path();
        try {
            tok = io::read_folder_tokenizer(dir.empty() ? "." : dir);
        } catch (const io_error& e) {
            throw io_error(source + ": its tokenizer is read from the files beside it: " + e.what());
        }
    } else if (kind == 1) {
        std::vector<char32_t> chars;
        for (std::size_t i = 0; c.count("vocab." + std::to_string(i)); ++i)
            chars.push_back(char32_t(checkpoint_entry(c, "vocab." + std::to_string(i), source, command)));
        tok = text::Tokenizer::from_vocabulary(std::move(chars));
    }
    if (tok.vocab_size() > vocab_size)
        throw value_error(source + ": its vocabulary of " + std::to_string(tok.vocab_size()) +
                          " tokens does not fit the model's vocab_size " + std::to_string(vocab_size));
    return tok;
}

inline io::CheckpointConfig checkpoint_config(const nn::GPTConfig& c, const text::Tokenizer& tok) {
    io::CheckpointConfig out{{"n_layer", std::int64_t(c.n_layer)},   {"n_head", std::int64_t(c.n_head)},
                             {"n_embd", std::int64_t(c.n_embd)},     {"block_size", std::int64_t(c.block_size)},
                             {"vocab_size", std::int64_t(c.vocab_size)}, {"bias", c.bias ? 1 : 0},
                             {"gelu", c.gelu == nn::GeluForm::tanh ? 1 : 0},
                             {"dropout_ppm", std::int64_t(c.dropout * 1e6 + 0.5)}};
    out.merge(tokenizer_config(tok));
    return out;
}

struct SavedModel {
    nn::GPTConfig config;
    text::Tokenizer tokenizer = text::Tokenizer::bytes();
};

// What checkpoint_config recorded; value_error naming `source` and the key when it does not hold a GPT.
inline SavedModel saved_model(const io::CheckpointConfig& c, const std::string& source) {
    const auto get = [&](const std::string& key) { return checkpoint_entry(c, key, source, "train gpt"); };
    SavedModel m;
    m.config.n_layer = std::size_t(get("n_layer")), m.config.n_head = std::size_t(get("n_head"));
    m.config.n_embd = std::size_t(get("n_embd")), m.config.block_size = std::size_t(get("block_size"));
    m.config.vocab_size = std::size_t(get("vocab_size")), m.config.bias = get("bias") != 0;
    m.config.gelu = get("gelu") ? nn::GeluForm::tanh : nn::GeluForm::erf;
    m.config.dropout = double(get("dropout_ppm")) / 1e6;
    m.tokenizer = checkpoint_tokenizer(c, source, m.config.vocab_size, "train gpt");
    return m;
}

// The tokenizer of any model `xgrad tokenize --model` takes: a folder's (io::read_folder_tokenizer),
// a SentencePiece tokenizer.model, or a `train gpt` or `train llama` checkpoint's.
inline text::Tokenizer tokenizer_of(const std::string& model) {
    if (std::filesystem::is_directory(model)) return io::read_folder_tokenizer(model);
    if (model.ends_with(".model")) return text::Tokenizer::sentencepiece(model);
    if (model.ends_with(".bin"))  // run.c's tokenizer.bin is written (export --to llama2c), never read
        throw value_error(model + ": xgrad writes llama2.c's tokenizer.bin but does not read it (and an llm.c or "
                                  "llama2.c model .bin holds no tokenizer): give the SentencePiece tokenizer.model "
                                  "instead, or a folder with GPT-2's vocab.json and merges.txt");
    const auto config = io::read_checkpoint_config(model);
    if (config.empty()) throw value_error(model + ": not a checkpoint of `xgrad train` (it has no config), nor a folder");
    const char* command = "xgrad train";
    return checkpoint_tokenizer(config, model, std::size_t(checkpoint_entry(config, "vocab_size", model, command)), command);
}

// `--tokenizer M` in place of a loaded model's own (LoadedModel, llama_task::LoadedLlama; an llm.c or
// llama2.c file has none): any M tokenizer_of reads, checked to fit the vocabulary of `source`'s model.
template <class Loaded>
void use_tokenizer(Loaded& m, const std::string& tokenizer, const std::string& source) {
    if (tokenizer.empty()) return;
    m.tokenizer = tokenizer_of(tokenizer);
    const std::size_t vocab_size = m.model.decoding().vocab_size;
    if (m.tokenizer->vocab_size() > vocab_size)
        throw value_error(fmt::format("--tokenizer {}: {} tokens, more than {}'s vocab_size {}", tokenizer,
                                      m.tokenizer->vocab_size(), source, vocab_size));
    m.usable_vocab = m.tokenizer->vocab_size();
}

// The config of a nanoGPT state dict (its arrays), which records no heads and no GELU form: n_layer,
// n_embd, block_size, vocab_size and the biases from the tensors, n_head and gelu as given.
inline nn::GPTConfig nanogpt_config(const std::map<std::string, io::NpyArray>& arrays, std::size_t n_head,
                                    nn::GeluForm gelu, const std::string& source) {
    const auto shape = [&](const std::string& key) {
        const auto it = arrays.find(key);
        if (it == arrays.end() || it->second.shape.size() != 2)
            throw io_error(source + ": has no 2-D " + key + " (not a nanoGPT state dict)");
        return it->second.shape;
    };
    nn::GPTConfig c;
    c.vocab_size = shape("transformer.wte.weight")[0], c.n_embd = shape("transformer.wte.weight")[1];
    c.block_size = shape("transformer.wpe.weight")[0], c.n_head = n_head, c.gelu = gelu, c.dropout = 0;
    c.bias = arrays.count("transformer.ln_f.bias") != 0;
    c.n_layer = 0;
    while (arrays.count("transformer.h." + std::to_string(c.n_layer) + ".ln_1.weight")) ++c.n_layer;
    if (c.n_embd % n_head != 0)
        throw value_error(source + ": --n_head " + std::to_string(n_head) + " does not divide its n_embd " +
                          std::to_string(c.n_embd));
    return c;
}

// A model ready to sample or study, and its tokenizer (none for an llm.c file: GPT-2's BPE ids).
struct LoadedModel {
    nn::GPT<float> model;
    std::optional<text::Tokenizer> tokenizer;
    std::size_t usable_vocab = 0;  // tokens past it are padding (llm.c), never sampled
};

// A `train gpt` checkpoint (.npz or .safetensors with its config), an llm.c model file (.bin), or a folder in
// Hugging Face's GPT-2 layout (io/gpt_folder.hpp: config.json, model.safetensors, the BPE files).
inline LoadedModel load_model(const std::filesystem::path& path) {
    LoadedModel out;
    Generator gen(0);
    if (std::filesystem::is_directory(path)) {
        io::GptFolder<float> folder = io::open_gpt_folder<float>(path);
        out.model = std::move(folder.model);
        out.usable_vocab = folder.tokenizer.vocab_size();
        out.tokenizer = std::move(folder.tokenizer);
    } else if (path.extension() == ".bin") {
        const io::LlmcFile f = io::read_llmc(path);
        out.model = nn::GPT<float>(f.config, gen);
        io::load_llmc(out.model, f);
        out.usable_vocab = f.vocab_size;
    } else {
        const SavedModel saved = saved_model(io::read_checkpoint_config(path), path.string());
        out.model = nn::GPT<float>(saved.config, gen);
        io::load_gpt_state_dict(out.model, path);
        out.tokenizer = saved.tokenizer;
        out.usable_vocab = saved.tokenizer.vocab_size();
    }
    set_training(out.model, false);
    return out;
}

// A token as an axis label: the character, with whitespace made visible.
inline std::string token_label(const text::Tokenizer& tok, std::int64_t id) {
    std::string s;
    tok.append(s, id);
    if (s == "\n") return "\\n";
    if (s == " ") return "_";
    if (s == "\t") return "\\t";
    return s;
}

// Every layer's and head's attention on the first `length` tokens of the val split: (layers·heads)
// maps in one grid, rows = queries, columns = keys, the tokens on both axes. Any decoder of the
// library (GPT, Llama).
template <class Model>
std::vector<unsigned char> attention_png(const Model& model, const text::Tokenizer& tok, const text::Windows& windows,
                                         int step, std::size_t length = 32) {
    const NoGrad no_grad;
    auto copy = model;
    set_training(copy, false);
    const std::size_t T = std::min({length, model.decoding().positions, windows.tokens(text::Split::val)});
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, T});
    windows.read(windows.tokens(text::Split::train), T, [&](std::size_t k, std::int64_t id) { idx(0, k) = id; });
    const auto out = copy.forward(idx, {.need_weights = true});
    const std::size_t L = out.attn_weights.size(), H = out.attn_weights.front().value().shape()[0];  // B = 1
    xt::xtensor<double, 3> maps = xt::xtensor<double, 3>::from_shape({L * H, T, T});
    cli::AttentionMaps labels;
    for (std::size_t l = 0; l < L; ++l)
        for (std::size_t h = 0; h < H; ++h) {
            const float* w = out.attn_weights[l].value().data() + h * T * T;  // (B·H, T, T) with B = 1
            std::copy(w, w + T * T, &maps(l * H + h, 0, 0));
            labels.panel_titles.push_back(fmt::format("layer {} head {}", l, h));
        }
    for (std::size_t t = 0; t < T; ++t) labels.key_labels.push_back(token_label(tok, idx(0, t)));
    labels.query_labels = labels.key_labels;
    labels.title = fmt::format("attention of every layer and head on the start of the val split, after {} steps", step);
    return cli::attention_grid_png(maps, labels);
}

}  // namespace xgrad::gpt_task

namespace xgrad::cli {
// `xgrad heads` on a GPT checkpoint (study/gpt_heads.cpp): prints the table, writes OUT/heads.png.
int gpt_heads(const std::string& checkpoint, const std::string& out_dir, int sequences, std::uint64_t seed,
              const std::string& text_file);
}  // namespace xgrad::cli
