// A Llama in Hugging Face's folder layout (xgrad/io/llama_folder.hpp): the tensors' names both ways,
// the rotary row order of q_proj and k_proj, sharded safetensors (config.json: llama_config_json.cpp).
#include "xgrad/io/llama_folder.hpp"

#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "json.hpp"

namespace xgrad::io {

namespace fs = std::filesystem;
using detail::Fields;
using detail::read_text;

namespace {

// A layer's tensors: nn::Llama's (model.py's) name beside LlamaForCausalLM's, under layers.{i}.
constexpr std::pair<const char*, const char*> layer_names[] = {
    {"attention_norm.weight", "input_layernorm.weight"},   {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"}};

// nn::Llama's name of every tensor of LlamaForCausalLM with c's layers; the other way with `to_hf`.
std::map<std::string, std::string> name_map(const nn::LlamaConfig& c, bool to_hf) {
    std::map<std::string, std::string> m;
    const auto add = [&](const std::string& mine, const std::string& theirs) { to_hf ? m.emplace(mine, theirs) : m.emplace(theirs, mine); };
    add("tok_embeddings.weight", "model.embed_tokens.weight");
    add("norm.weight", "model.norm.weight");
    add("output.weight", "lm_head.weight");
    for (std::size_t l = 0; l < c.n_layers; ++l)
        for (const auto& [mine, theirs] : layer_names)
            add("layers." + std::to_string(l) + "." + mine, "model.layers." + std::to_string(l) + "." + theirs);
    return m;
}

// The rows of a (heads · head_dim, dim) weight between Meta's order (head h's row pair 2i, 2i + 1)
// and Hugging Face's (row i of the head's first half, row i of its second): Meta row h·d + 2i + p is
// Hugging Face row h·d + p·d/2 + i.
NpyArray permute_rotary_rows(const NpyArray& a, std::size_t heads, bool to_hf) {
    const std::size_t rows = a.shape.at(0), row_bytes = a.bytes.size() / rows, d = rows / heads;
    NpyArray out = a;
    for (std::size_t h = 0; h < heads; ++h)
        for (std::size_t i = 0; i < d / 2; ++i)
            for (std::size_t p = 0; p < 2; ++p) {
                const std::size_t meta = h * d + 2 * i + p, hf = h * d + p * (d / 2) + i;
                const std::size_t from = to_hf ? meta : hf, to = to_hf ? hf : meta;
                std::memcpy(out.bytes.data() + to * row_bytes, a.bytes.data() + from * row_bytes, row_bytes);
            }
    return out;
}

bool is_rotary_weight(const std::string& mine, std::size_t* heads, const nn::LlamaConfig& c) {
    if (mine.ends_with("attention.wq.weight")) return *heads = c.n_heads, true;
    if (mine.ends_with("attention.wk.weight")) return *heads = c.kv_heads(), true;
    return false;
}

// The tensors of the folder's safetensors files: model.safetensors, or the shards of
// model.safetensors.index.json (each tensor from the file its weight_map names).
std::map<std::string, NpyArray> read_tensors(const fs::path& dir) {
    std::error_code ec;
    const fs::path index = dir / "model.safetensors.index.json";
    std::map<std::string, NpyArray> out;
    if (!fs::exists(index, ec)) {
        const fs::path single = dir / "model.safetensors";
        if (!fs::is_regular_file(single, ec))
            throw io_error(dir.string() + ": has neither model.safetensors nor model.safetensors.index.json");
        const SafetensorsFile st = SafetensorsFile::open(single);
        for (const auto& [name, t] : st.tensors()) out.emplace(name, st.array(name));
        return out;
    }
    const std::string source = index.string(), text = read_text(index);
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    const Fields f{j, source};
    const nlohmann::json* map = j.is_object() ? f.find("weight_map") : nullptr;
    if (!map || !map->is_object() || map->empty()) f.fail("weight_map", "must be an object of tensor names and files");
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [name, file] : map->items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
            f.fail("weight_map", "gives '" + name + "' the file " + Fields::shown(file) + ", not a file name of the folder");
        by_file[file.get<std::string>()].push_back(name);
    }
    for (const auto& [file, names] : by_file) {
        const SafetensorsFile st = SafetensorsFile::open(dir / file);
        for (const auto& name : names) {
            if (!st.tensors().count(name))
                throw io_error((dir / file).string() + ": has no tensor '" + name + "', which " + source + " puts there");
            out.emplace(name, st.array(name));
        }
    }
    return out;
}

}  // namespace

std::map<std::string, NpyArray> read_hf_llama_weights(const fs::path& dir, const nn::LlamaConfig& c) {
    const auto names = name_map(c, false);
    std::map<std::string, NpyArray> out;
    for (auto& [theirs, a] : read_tensors(dir)) {
        if (theirs.ends_with("rotary_emb.inv_freq")) continue;  // a buffer older checkpoints kept
        const auto it = names.find(theirs);
        if (it == names.end())
            throw io_error(dir.string() + ": tensor '" + theirs + "' is not a parameter of the Llama config.json describes (" +
                           std::to_string(c.n_layers) + " layers)");
        if (!a.is_float())
            throw io_error(dir.string() + ": tensor '" + theirs + "' is not floating point");
        std::size_t heads = 0;
        const bool rotary = is_rotary_weight(it->second, &heads, c);
        if (rotary && (a.shape.size() != 2 || a.shape[0] != heads * c.head_dim()))
            throw io_error(dir.string() + ": tensor '" + theirs + "' has shape " + shape_str(a.shape) + ", config.json needs " +
                           std::to_string(heads * c.head_dim()) + " rows (" + std::to_string(heads) + " heads of " +
                           std::to_string(c.head_dim()) + ")");
        out.emplace(it->second, rotary ? permute_rotary_rows(a, heads, false) : std::move(a));
    }
    if (c.tie_embeddings && !out.count("output.weight") && out.count("tok_embeddings.weight"))
        out.emplace("output.weight", out.at("tok_embeddings.weight"));
    return out;
}

std::map<std::string, NpyArray> hf_llama_weights(const std::map<std::string, NpyArray>& state_dict,
                                                 const nn::LlamaConfig& c) {
    const auto names = name_map(c, true);
    std::map<std::string, NpyArray> out;
    for (const auto& [mine, a] : state_dict) {
        if (mine == "output.weight" && c.tie_embeddings) continue;  // lm_head is embed_tokens
        const auto it = names.find(mine);
        if (it == names.end()) throw value_error("hf_llama_weights: '" + mine + "' is not a parameter of nn::Llama");
        std::size_t heads = 0;
        out.emplace(it->second, is_rotary_weight(mine, &heads, c) ? permute_rotary_rows(a, heads, true) : a);
    }
    return out;
}

}  // namespace xgrad::io
