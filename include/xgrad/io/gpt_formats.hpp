// The files an nn::GPT is saved in elsewhere, read and written:
//
//   io::load_gpt_state_dict(model, "ckpt.npz");   // nanoGPT's state dict (numpy.savez of it) or
//                                                 // Hugging Face GPT-2's (Conv1D weights transposed)
//   auto f = io::read_llmc("gpt2_124M.bin");       // llm.c's checkpoint: f.config, f.vocab_size
//   nn::GPT<float> m(f.config, gen);  io::load_llmc(m, f);
//   io::save_llmc(m, "out.bin", vocab_size);       // and back, for llm.c's train_gpt2.c
//
// State dicts: nanoGPT's attn.bias (its causal mask, (1, 1, block_size, block_size) ones below the
// diagonal) and Hugging Face's attn.masked_bias are buffers the model computes itself: they are
// checked and skipped. Hugging Face stores c_attn, c_proj and c_fc weights as Conv1D (in, out); a
// c_attn.weight of shape (C, 3C) marks that layout and those four weights of every block are
// transposed.
// llm.c (train_gpt2.c): 256 int32 (magic 20240326, version 3, max_seq_len, vocab_size, num_layers,
// num_heads, channels, padded_vocab_size), then 16 float32 tensors: wte (Vp, C), wpe (maxT, C), each
// layer's ln1w, ln1b, qkvw (3C, C), qkvb, attprojw (C, C), attprojb, ln2w, ln2b, fcw (4C, C), fcb,
// fcprojw (C, 4C), fcprojb stacked over the layers (L, ...), then lnfw, lnfb. Its GELU is the tanh
// form and it has biases; the model's vocab_size is the padded Vp.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/io/file.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/gpt.hpp"

namespace xgrad::io {

namespace detail {

// ("...attn.c_attn.bias" ends in "_attn.bias": a parameter.)
inline bool is_gpt_buffer(const std::string& key) {
    return key.ends_with(".attn.bias") || key.ends_with(".attn.masked_bias");
}

// nanoGPT's causal-mask buffer must be what the model computes: ones on and below the diagonal.
inline void check_causal_buffer(const NpyArray& a, const std::string& key) {
    if (key.ends_with(".masked_bias")) return;  // Hugging Face's constant -1e4: not used by its forward
    const auto m = a.as_xarray<double>(true);
    const std::size_t n = a.shape.empty() ? 0 : a.shape.back();
    bool ok = a.shape.size() == 4 && a.shape[2] == n;
    for (std::size_t i = 0; ok && i < n; ++i)
        for (std::size_t j = 0; ok && j < n; ++j) ok = m.data()[i * n + j] == (j <= i ? 1.0 : 0.0);
    if (!ok)
        throw io_error(a.source + ": " + key + " of shape " + shape_str(a.shape) +
                       " is not a causal mask (ones on and below the diagonal); xgrad's GPT computes it");
}

// A 2-D array's transpose (Conv1D (in, out) <-> Linear (out, in)).
inline NpyArray transposed(const NpyArray& a) {
    NpyArray t = a;
    const std::size_t rows = a.shape[0], cols = a.shape[1], item = a.bytes.size() / std::max<std::size_t>(a.size(), 1);
    t.shape = {cols, rows};
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j)
            std::memcpy(t.bytes.data() + (j * rows + i) * item, a.bytes.data() + (i * cols + j) * item, item);
    return t;
}

}  // namespace detail

// The one mapping between nanoGPT's names (nn::GPT's) and Hugging Face GPT2Model's, both directions:
// "transformer.h.0.attn.c_attn.weight" <-> "h.0.attn.c_attn.weight"; lm_head.weight keeps its name
// (GPT-2 ties it to wte and does not store it). The c_attn, c_proj and c_fc weights are Conv1D
// (in, out) in Hugging Face's layout, Linear (out, in) in nanoGPT's.
inline constexpr std::string_view gpt_hf_prefix = "transformer.";
inline std::string gpt_name_to_hf(const std::string& name) {
    return name.starts_with(gpt_hf_prefix) ? name.substr(gpt_hf_prefix.size()) : name;
}
inline std::string gpt_name_from_hf(const std::string& name) {
    if (name == "lm_head.weight" || name.starts_with(gpt_hf_prefix)) return name;
    return std::string(gpt_hf_prefix) + name;
}
inline bool is_gpt_conv1d_weight(const std::string& name) {
    return name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_proj.weight") ||
           name.ends_with("mlp.c_fc.weight") || name.ends_with("mlp.c_proj.weight");
}

// A nanoGPT or Hugging Face GPT-2 state dict into `model`, strictly (every parameter, no other key
// but the buffers); float32 files load into double models and back.
template <Real T>
LoadResult load_gpt_state_dict(nn::GPT<T>& model, const std::map<std::string, NpyArray>& arrays,
                               const std::string& source = "state dict") {
    std::map<std::string, NpyArray> fixed;
    const auto first_qkv = arrays.find("transformer.h.0.attn.c_attn.weight");
    const bool conv1d = first_qkv != arrays.end() && first_qkv->second.shape.size() == 2 &&
                        first_qkv->second.shape[1] == 3 * first_qkv->second.shape[0];
    for (const auto& [key, a] : arrays) {
        if (is_train_state_key(key)) continue;
        if (detail::is_gpt_buffer(key)) {
            detail::check_causal_buffer(a, key);
            continue;
        }
        fixed[key] = conv1d && a.shape.size() == 2 && is_gpt_conv1d_weight(key) ? detail::transposed(a) : a;
    }
    LoadStateDictOptions opts;
    opts.convert_dtype = true;
    return load_state_dict(model, fixed, opts, source);
}
template <Real T>
LoadResult load_gpt_state_dict(nn::GPT<T>& model, const std::filesystem::path& path) {
    return load_gpt_state_dict(model, read_arrays(path), path.string());
}

// The model's parameters in Hugging Face's GPT-2 layout (GPT2Model's names, Conv1D weights (in, out),
// no lm_head.weight): what model.safetensors holds, and what load_gpt_state_dict reads back.
template <Real T>
std::map<std::string, NpyArray> gpt_state_dict_hf(const nn::GPT<T>& model) {
    std::map<std::string, NpyArray> out;
    for (auto& [name, a] : state_dict(model))
        if (name != "lm_head.weight")
            out.emplace(gpt_name_to_hf(name), is_gpt_conv1d_weight(name) ? detail::transposed(a) : std::move(a));
    return out;
}

// ---- llm.c ----

struct LlmcFile {
    nn::GPTConfig config;         // vocab_size = the padded Vp; gelu tanh; bias
    std::size_t vocab_size = 0;   // the tokenizer's V <= Vp (rows past it are padding)
    std::vector<float> params;    // the 16 tensors, in llm.c's order
    std::string source;
};

namespace detail {

inline constexpr std::int32_t llmc_magic = 20240326, llmc_version = 3;

// The 16 tensors' sizes in llm.c's order (train_gpt2.c: fill_in_parameter_sizes).
inline std::array<std::size_t, 16> llmc_sizes(const nn::GPTConfig& c) {
    const std::size_t V = c.vocab_size, C = c.n_embd, T = c.block_size, L = c.n_layer;
    return {V * C, T * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C,
            L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
}

// Calls f(tensor index, layer, var) for each of the model's tensors in llm.c's order; layer is the
// block for the per-layer tensors 2..13 and 0 otherwise.
template <class Model, class F>  // nn::GPT<T>, const or not
void for_each_llmc_tensor(Model& m, F&& f) {
    f(0, 0, m.transformer.wte.weight);
    f(1, 0, m.transformer.wpe.weight);
    for (std::size_t l = 0; l < m.transformer.h.size(); ++l) {
        auto& b = m.transformer.h[l];
        f(2, l, b.ln_1.weight), f(3, l, b.ln_1.bias), f(4, l, b.attn.c_attn.weight), f(5, l, b.attn.c_attn.bias);
        f(6, l, b.attn.c_proj.weight), f(7, l, b.attn.c_proj.bias), f(8, l, b.ln_2.weight), f(9, l, b.ln_2.bias);
        f(10, l, b.mlp.c_fc.weight), f(11, l, b.mlp.c_fc.bias), f(12, l, b.mlp.c_proj.weight), f(13, l, b.mlp.c_proj.bias);
    }
    f(14, 0, m.transformer.ln_f.weight);
    f(15, 0, m.transformer.ln_f.bias);
}

}  // namespace detail

inline LlmcFile read_llmc(const std::filesystem::path& path) {
    const auto bytes = read_file_bytes(path);
    LlmcFile f;
    f.source = path.string();
    std::array<std::int32_t, 256> header{};
    if (bytes.size() < sizeof(header)) throw io_error(f.source + ": too short for llm.c's 256-int header");
    std::memcpy(header.data(), bytes.data(), sizeof(header));
    if (header[0] != detail::llmc_magic)
        throw io_error(f.source + ": bad magic " + std::to_string(header[0]) + " (llm.c's model files start with 20240326)");
    if (header[1] != detail::llmc_version)
        throw io_error(f.source + ": llm.c model file version " + std::to_string(header[1]) + ", xgrad reads version 3");
    for (int k = 2; k <= 7; ++k)
        if (header[k] <= 0) throw io_error(f.source + ": header field " + std::to_string(k) + " is not positive");
    if (header[3] > header[7]) throw io_error(f.source + ": vocab_size is above padded_vocab_size");
    f.config.block_size = std::size_t(header[2]), f.vocab_size = std::size_t(header[3]);
    f.config.n_layer = std::size_t(header[4]), f.config.n_head = std::size_t(header[5]);
    f.config.n_embd = std::size_t(header[6]), f.config.vocab_size = std::size_t(header[7]);
    f.config.bias = true, f.config.gelu = nn::GeluForm::tanh;
    f.config.validate();
    std::size_t total = 0;
    for (std::size_t s : detail::llmc_sizes(f.config)) total += s;
    if (bytes.size() != sizeof(header) + total * sizeof(float))
        throw io_error(f.source + ": holds " + std::to_string(bytes.size() - sizeof(header)) + " bytes of parameters, " +
                       "its header asks for " + std::to_string(total * sizeof(float)));
    f.params.resize(total);
    std::memcpy(f.params.data(), bytes.data() + sizeof(header), total * sizeof(float));
    return f;
}

// f's parameters into `model` (built with f.config, or one of the same shape).
template <Real T>
void load_llmc(nn::GPT<T>& model, const LlmcFile& f) {
    const nn::GPTConfig &m = model.config, &c = f.config;
    const auto sizes = detail::llmc_sizes(m);
    if (m.n_layer != c.n_layer || m.n_embd != c.n_embd || m.vocab_size != c.vocab_size || m.block_size != c.block_size ||
        !m.bias)
        throw io_error(f.source + ": does not fit the model (it needs n_layer " + std::to_string(f.config.n_layer) +
                       ", n_embd " + std::to_string(f.config.n_embd) + ", vocab " + std::to_string(f.config.vocab_size) +
                       ", block_size " + std::to_string(f.config.block_size) + " and biases)");
    std::array<std::size_t, 16> offset{};
    for (std::size_t k = 1; k < 16; ++k) offset[k] = offset[k - 1] + sizes[k - 1];
    detail::for_each_llmc_tensor(model, [&](std::size_t k, std::size_t layer, auto& var) {
        const std::size_t n = var.value().size();
        std::copy_n(f.params.data() + offset[k] + layer * n, n, var.value().data());
    });
}

// The model as llm.c's checkpoint; vocab_size is the tokenizer's V (<= the model's padded vocab).
template <Real T>
void save_llmc(const nn::GPT<T>& model, const std::filesystem::path& path, std::size_t vocab_size) {
    const nn::GPTConfig& c = model.config;
    if (!c.bias || c.gelu != nn::GeluForm::tanh || vocab_size == 0 || vocab_size > c.vocab_size)
        throw value_error("save_llmc: " + path.string() + ": llm.c's GPT-2 has biases, the tanh GELU and vocab_size " +
                          "<= the padded vocabulary (" + std::to_string(c.vocab_size) + "); this model has " +
                          (c.bias ? "biases" : "no biases") + ", the " + (c.gelu == nn::GeluForm::tanh ? "tanh" : "erf") +
                          " GELU, vocab_size " + std::to_string(vocab_size));
    std::array<std::int32_t, 256> header{};
    header[0] = detail::llmc_magic, header[1] = detail::llmc_version;
    header[2] = std::int32_t(c.block_size), header[3] = std::int32_t(vocab_size), header[4] = std::int32_t(c.n_layer);
    header[5] = std::int32_t(c.n_head), header[6] = std::int32_t(c.n_embd), header[7] = std::int32_t(c.vocab_size);
    const auto sizes = detail::llmc_sizes(c);
    std::size_t total = 0;
    for (std::size_t s : sizes) total += s;
    std::vector<std::byte> bytes(sizeof(header) + total * sizeof(float));
    std::memcpy(bytes.data(), header.data(), sizeof(header));
    float* out = reinterpret_cast<float*>(bytes.data() + sizeof(header));
    std::array<std::size_t, 16> offset{};
    for (std::size_t k = 1; k < 16; ++k) offset[k] = offset[k - 1] + sizes[k - 1];
    detail::for_each_llmc_tensor(model, [&](std::size_t k, std::size_t layer, auto& var) {
        const std::size_t n = var.value().size();
        std::transform(var.value().data(), var.value().data() + n, out + offset[k] + layer * n,
                       [](T v) { return float(v); });
    });
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace xgrad::io
