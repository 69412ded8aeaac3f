// llama2.c's checkpoint, the file its run.c reads (export.py's legacy_export, "version 0"), both ways:
//
//   auto f = io::read_llama2c("stories15M.bin");      // mapped: f.config, the weights in place
//   nn::Llama<float> m(f.config, gen);  io::load_llama2c(m, f);
//   io::save_llama2c(m, "model.bin");                 // and back, for run.c
//
// Layout: 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len; a
// negative vocab_size: the output layer is not tied to the embedding), then float32 tensors in this
// order: tok_embeddings (vocab, dim); per kind, every layer's attention_norm (dim), wq (dim, dim),
// wk (kv_dim, dim), wv, wo (dim, dim), ffn_norm, w1 (hidden, dim), w2 (dim, hidden), w3; norm (dim);
// the rotary tables freqs_cos and freqs_sin (max_seq_len, head_dim / 2), which run.c skips and xgrad
// computes itself (read and ignored, written from the model's); output (vocab, dim) when untied.
// run.c's RMSNorm eps is 1e-5 and its rope theta 10000: a model read here has those.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/io/file.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::io {

struct Llama2cFile {
    std::string source;
    nn::LlamaConfig config;  // hidden_dim given; tie_embeddings from the vocab size's sign
    MappedFile file;
    static constexpr std::size_t header_bytes = 7 * sizeof(std::int32_t);
    const float* weights() const { return reinterpret_cast<const float*>(file.bytes().data() + header_bytes); }
};

namespace detail {

// f(var) for every tensor of the file in its order; g(count) for the rotary tables' floats between
// norm and output (2 · max_seq_len · head_dim / 2).
template <class M, class F, class G>
void for_each_llama2c_tensor(M& m, const F& f, const G& rope_tables) {
    f(m.tok_embeddings.weight);
    const auto each_layer = [&](auto member) {
        for (auto& layer : m.layers) f(member(layer));
    };
    each_layer([](auto& l) -> auto& { return l.attention_norm.weight; });
    each_layer([](auto& l) -> auto& { return l.attention.wq.weight; });
    each_layer([](auto& l) -> auto& { return l.attention.wk.weight; });
    each_layer([](auto& l) -> auto& { return l.attention.wv.weight; });
    each_layer([](auto& l) -> auto& { return l.attention.wo.weight; });
    each_layer([](auto& l) -> auto& { return l.ffn_norm.weight; });
    each_layer([](auto& l) -> auto& { return l.feed_forward.w1.weight; });
    each_layer([](auto& l) -> auto& { return l.feed_forward.w2.weight; });
    each_layer([](auto& l) -> auto& { return l.feed_forward.w3.weight; });
    f(m.norm.weight);
    rope_tables(m.config.max_seq_len * m.config.head_dim());
    if (!m.config.tie_embeddings) f(m.output.weight);
}

// The floats a checkpoint of config c holds after its header.
inline std::size_t llama2c_floats(const nn::LlamaConfig& c) {
    const std::size_t kv_dim = c.kv_heads() * c.head_dim(), hidden = c.ffn_hidden();
    const std::size_t per_layer = 2 * c.dim + 2 * c.dim * c.dim + 2 * kv_dim * c.dim + 3 * hidden * c.dim;
    return c.vocab_size * c.dim * (c.tie_embeddings ? 1 : 2) + c.n_layers * per_layer + c.dim +
           c.max_seq_len * c.head_dim();
}

}  // namespace detail

// The checkpoint at `path`, mapped; its header checked against the file's size (io_error naming it).
inline Llama2cFile read_llama2c(const std::filesystem::path& path) {
    Llama2cFile f;
    f.source = path.string();
    f.file = MappedFile::open(path);
    const auto bytes = f.file.bytes();
    std::array<std::int32_t, 7> h{};
    if (bytes.size() < sizeof(h)) throw io_error(f.source + ": too short for llama2.c's 7-int header");
    std::memcpy(h.data(), bytes.data(), sizeof(h));
    const char* names[] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "max_seq_len"};
    for (std::size_t k = 0; k < 7; ++k)
        if (h[k] == 0 || (h[k] < 0 && k != 5) || std::abs(std::int64_t(h[k])) > (std::int64_t(1) << 24))
            throw io_error(f.source + ": header field " + names[k] + " is " + std::to_string(h[k]) +
                           ", not a size (is this a llama2.c checkpoint of export.py's legacy layout?)");
    nn::LlamaConfig& c = f.config;
    c.dim = std::size_t(h[0]), c.hidden_dim = std::size_t(h[1]), c.n_layers = std::size_t(h[2]);
    c.n_heads = std::size_t(h[3]), c.n_kv_heads = std::size_t(h[4]);
    c.vocab_size = std::size_t(std::abs(h[5])), c.tie_embeddings = h[5] > 0, c.max_seq_len = std::size_t(h[6]);
    c.norm_eps = 1e-5, c.rope_theta = 10000;
    try {
        c.validate();
    } catch (const value_error& e) {
        throw io_error(f.source + ": " + e.what());
    }
    const std::size_t want = detail::llama2c_floats(c) * sizeof(float);
    if (bytes.size() - sizeof(h) != want)
        throw io_error(f.source + ": holds " + std::to_string(bytes.size() - sizeof(h)) + " bytes of weights, its header (" +
                       "dim " + std::to_string(c.dim) + ", " + std::to_string(c.n_layers) + " layers, vocab " +
                       std::to_string(c.vocab_size) + (c.tie_embeddings ? ", tied" : ", untied") + ") asks for " +
                       std::to_string(want));
    return f;
}

// f's weights into `model` (built with f.config, or one of the same sizes).
template <Real T>
void load_llama2c(nn::Llama<T>& model, const Llama2cFile& f) {
    const nn::LlamaConfig &m = model.config, &c = f.config;
    if (m.dim != c.dim || m.n_layers != c.n_layers || m.n_heads != c.n_heads || m.kv_heads() != c.kv_heads() ||
        m.vocab_size != c.vocab_size || m.ffn_hidden() != c.ffn_hidden() || m.max_seq_len != c.max_seq_len ||
        m.tie_embeddings != c.tie_embeddings)
        throw io_error(f.source + ": does not fit the model (build it with the file's config: read_llama2c(...).config)");
    const float* in = f.weights();
    detail::for_each_llama2c_tensor(model, [&](auto& var) {
        std::copy_n(in, var.size(), var.value().data());
        in += var.size();
    }, [&](std::size_t rope_floats) { in += rope_floats; });
}

// The model as run.c's checkpoint, float32 (the rotary tables from the model's own).
template <Real T>
void save_llama2c(const nn::Llama<T>& model, const std::filesystem::path& path) {
    const nn::LlamaConfig& c = model.config;
    if (c.rope_theta != 10000 || c.norm_eps != 1e-5)
        throw value_error("save_llama2c: " + path.string() + ": run.c computes with rope theta 10000 and RMSNorm eps 1e-5; "
                          "this model has theta " + std::to_string(c.rope_theta) + " and eps " + std::to_string(c.norm_eps));
    const std::array<std::int32_t, 7> header{std::int32_t(c.dim),        std::int32_t(c.ffn_hidden()),
                                             std::int32_t(c.n_layers),   std::int32_t(c.n_heads),
                                             std::int32_t(c.kv_heads()), std::int32_t(c.vocab_size) * (c.tie_embeddings ? 1 : -1),
                                             std::int32_t(c.max_seq_len)};
    std::vector<std::byte> bytes(sizeof(header) + detail::llama2c_floats(c) * sizeof(float));
    std::memcpy(bytes.data(), header.data(), sizeof(header));
    float* out = reinterpret_cast<float*>(bytes.data() + sizeof(header));
    const auto put = [&](const T* first, std::size_t n) {
        out = std::transform(first, first + n, out, [](T v) { return float(v); });
    };
    detail::for_each_llama2c_tensor(model, [&](const auto& var) { put(var.value().data(), var.size()); },
                                    [&](std::size_t) {
                                        put(model.rope.cos.data(), model.rope.cos.size());
                                        put(model.rope.sin.data(), model.rope.sin.size());
                                    });
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace xgrad::io
