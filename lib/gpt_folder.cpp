// GPT-2 in Hugging Face's folder layout (xgrad/io/gpt_folder.hpp): config.json, model.safetensors
// and the BPE files, read and checked against each other.
#include "xgrad/io/gpt_folder.hpp"

#include <cmath>
#include <fstream>
#include <sstream>
#include <vector>

#include "json_unique.hpp"
#include "xgrad/io/safetensors.hpp"

namespace xgrad::io {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw io_error(path.string() + ": no such file");
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || in.bad()) throw io_error(path.string() + ": cannot be read");
    return text.str();
}

// One field of config.json at a time; every problem names the file and the field.
struct Fields {
    const nlohmann::json& j;
    const std::string& source;

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw io_error(source + ": field \"" + field + "\" " + what);
    }
    static std::string shown(const nlohmann::json& v) {
        return v.is_structured() ? std::string("an ") + v.type_name() : v.dump();
    }
    const nlohmann::json* find(const std::string& field) const {
        const auto it = j.find(field);
        return it == j.end() ? nullptr : &*it;
    }
    std::size_t positive(const std::string& field) const {
        const nlohmann::json* v = find(field);
        if (!v) fail(field, "is missing");
        if (!v->is_number_integer() || v->get<long long>() <= 0 || v->get<long long>() > (1LL << 40))
            fail(field, "must be a positive integer, got " + shown(*v));
        return std::size_t(v->get<long long>());
    }
    // An optional boolean that nn::GPT supports with one value only (GPT2Config's default).
    void boolean_must_be(const std::string& field, bool supported, const std::string& why) const {
        const nlohmann::json* v = find(field);
        if (!v) return;
        if (!v->is_boolean()) fail(field, "must be true or false, got " + shown(*v));
        if (v->get<bool>() != supported) fail(field, "is " + shown(*v) + ": " + why);
    }
};

}  // namespace

nn::GPTConfig parse_gpt2_config(const std::string& text, const std::string& source) {
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    if (!j.is_object()) throw io_error(source + ": must hold a JSON object, got " + std::string(j.type_name()));
    const Fields f{j, source};
    nn::GPTConfig c;
    c.n_layer = f.positive("n_layer"), c.n_head = f.positive("n_head"), c.n_embd = f.positive("n_embd");
    c.block_size = f.positive("n_positions"), c.vocab_size = f.positive("vocab_size");
    c.dropout = 0;  // the resid_pdrop, embd_pdrop and attn_pdrop of training are not kept
    if (c.n_embd % c.n_head != 0)
        f.fail("n_head", "(" + std::to_string(c.n_head) + ") must divide n_embd (" + std::to_string(c.n_embd) + ")");
    if (const nlohmann::json* v = f.find("model_type"); v && *v != "gpt2")
        f.fail("model_type", "is " + Fields::shown(*v) + "; this reader takes GPT-2 (\"gpt2\")");
    c.gelu = nn::GeluForm::tanh;  // GPT2Config's default activation, "gelu_new"
    if (const nlohmann::json* v = f.find("activation_function")) {
        if (!v->is_string()) f.fail("activation_function", "must be a string, got " + Fields::shown(*v));
        const std::string a = v->get<std::string>();
        if (a == "gelu") c.gelu = nn::GeluForm::erf;
        else if (a != "gelu_new" && a != "gelu_pytorch_tanh" && a != "gelu_fast")
            f.fail("activation_function", "is \"" + a + "\"; nn::GPT has the GELU only: \"gelu_new\", \"gelu_pytorch_tanh\", "
                                          "\"gelu_fast\" (the tanh form) or \"gelu\" (erf)");
    }
    if (const nlohmann::json* v = f.find("layer_norm_epsilon")) {  // GPT2Config's default: 1e-5
        if (!v->is_number()) f.fail("layer_norm_epsilon", "must be a number, got " + Fields::shown(*v));
        if (std::abs(v->get<double>() - 1e-5) > 1e-5 * 1e-9)
            f.fail("layer_norm_epsilon", "is " + v->dump() + "; nn::GPT's LayerNorms use 1e-5 (GPT-2's)");
    }
    if (const nlohmann::json* v = f.find("n_inner"); v && !v->is_null()) {
        if (!v->is_number_integer() || v->get<long long>() != (long long)(4 * c.n_embd))
            f.fail("n_inner", "is " + Fields::shown(*v) + "; nn::GPT's MLP has 4 * n_embd = " + std::to_string(4 * c.n_embd) +
                                  " units (null in GPT-2's configs)");
    }
    f.boolean_must_be("scale_attn_weights", true, "nn::GPT scales the attention scores by 1/sqrt(head size)");
    f.boolean_must_be("scale_attn_by_inverse_layer_idx", false, "nn::GPT does not scale scores by the layer index");
    f.boolean_must_be("add_cross_attention", false, "nn::GPT is a decoder without cross-attention");
    f.boolean_must_be("tie_word_embeddings", true, "nn::GPT's lm_head is wte (tied)");
    if (const nlohmann::json* v = f.find("bias")) {
        if (!v->is_boolean()) f.fail("bias", "must be true or false, got " + Fields::shown(*v));
        c.bias = v->get<bool>();
    }
    return c;
}

nn::GPTConfig read_gpt2_config(const fs::path& config_json) {
    return parse_gpt2_config(read_text(config_json), config_json.string());
}

std::map<std::string, NpyArray> read_gpt2_safetensors(const fs::path& path, const nn::GPTConfig& c) {
    const std::string source = path.string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw io_error(source + ": no such file");
    const SafetensorsFile st = SafetensorsFile::open(path);
    // Hugging Face's names and shapes (Conv1D weights (in, out)) of the config's model
    using Shape = std::vector<std::size_t>;
    const std::size_t C = c.n_embd;
    std::map<std::string, Shape> expected{{"wte.weight", {c.vocab_size, C}}, {"wpe.weight", {c.block_size, C}},
                                          {"ln_f.weight", {C}}};
    if (c.bias) expected["ln_f.bias"] = {C};
    for (std::size_t l = 0; l < c.n_layer; ++l) {
        const std::string h = "h." + std::to_string(l) + ".";
        const std::map<std::string, std::pair<Shape, Shape>> block{
            {"ln_1", {{C}, {C}}},        {"attn.c_attn", {{C, 3 * C}, {3 * C}}}, {"attn.c_proj", {{C, C}, {C}}},
            {"ln_2", {{C}, {C}}},        {"mlp.c_fc", {{C, 4 * C}, {4 * C}}},    {"mlp.c_proj", {{4 * C, C}, {C}}}};
        for (const auto& [name, shapes] : block) {
            expected[h + name + ".weight"] = shapes.first;
            if (c.bias) expected[h + name + ".bias"] = shapes.second;
        }
    }
    std::map<std::string, NpyArray> out;
    std::map<std::string, std::string> file_name;  // Hugging Face's name -> the file's
    for (const auto& [key, t] : st.tensors()) {
        const std::string name = gpt_name_to_hf(key);
        if (const auto [it, fresh] = file_name.emplace(name, key); !fresh)
            throw io_error(source + ": tensors '" + it->second + "' and '" + key + "' are the same parameter");
        if (io::detail::is_gpt_buffer(name)) continue;  // the causal mask (nn::GPT's is a rule) and a constant
        const bool lm_head = name == "lm_head.weight";
        const auto want = lm_head ? expected.find("wte.weight") : expected.find(name);
        if (want == expected.end())
            throw io_error(source + ": tensor '" + key + "' is not a parameter of the GPT-2 config.json describes (" +
                           std::to_string(c.n_layer) + " layers" + (c.bias ? "" : ", no biases") + ")");
        if (t.shape != want->second)
            throw io_error(source + ": tensor '" + key + "' has shape " + shape_str(t.shape) + ", config.json (n_embd " +
                           std::to_string(C) + ", vocab_size " + std::to_string(c.vocab_size) + ", n_positions " +
                           std::to_string(c.block_size) + ") needs " + shape_str(want->second) +
                           (want->second.size() == 2 && name.starts_with("h.") ? " (Conv1D: in, out)" : ""));
        if (t.dtype != SafetensorsDtype::F32 && t.dtype != SafetensorsDtype::F16 && t.dtype != SafetensorsDtype::BF16 &&
            t.dtype != SafetensorsDtype::F64)
            throw io_error(source + ": tensor '" + key + "' has dtype " + safetensors_dtype_name(t.dtype) +
                           ", a weight must be F32, F16, BF16 or F64");
        out.emplace(gpt_name_from_hf(name), st.array(key));
    }
    for (const auto& [name, shape] : expected)
        if (!file_name.count(name))
            throw io_error(source + ": tensor '" + name + "' is missing (config.json: n_layer " + std::to_string(c.n_layer) +
                           (c.bias ? "" : ", no biases") + ")");
    if (!out.count("lm_head.weight")) out.emplace("lm_head.weight", out.at("transformer.wte.weight"));  // tied
    return out;
}

text::Tokenizer read_gpt2_tokenizer(const fs::path& dir, const nn::GPTConfig& c) {
    text::Tokenizer tok = read_folder_tokenizer(dir);
    const fs::path file = dir / (tok.kind() == text::Tokenizer::Kind::bpe ? "vocab.json" : xgrad_tokenizer_file);
    if (tok.vocab_size() > c.vocab_size)
        throw io_error(file.string() + ": " + std::to_string(tok.vocab_size()) + " tokens, more than " +
                       (dir / "config.json").string() + "'s vocab_size " + std::to_string(c.vocab_size));
    return tok;
}

text::Tokenizer read_folder_tokenizer(const fs::path& dir) {
    std::error_code ec;
    const fs::path path = dir / xgrad_tokenizer_file;
    if (!fs::exists(path, ec)) return text::Tokenizer::bpe_folder(dir);
    const std::string source = path.string(), text = read_text(path);
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    if (!j.is_object()) throw io_error(source + ": must hold a JSON object, got " + std::string(j.type_name()));
    const Fields f{j, source};
    if (f.positive("version") != 1) f.fail("version", "is " + j["version"].dump() + "; this xgrad reads version 1");
    const nlohmann::json* kind = f.find("kind");
    if (!kind) f.fail("kind", "is missing");
    if (*kind == "byte") return text::Tokenizer::bytes();
    if (*kind != "character") f.fail("kind", "must be \"byte\" or \"character\", got " + Fields::shown(*kind));
    const nlohmann::json* chars = f.find("characters");
    if (!chars) f.fail("characters", "is missing");
    if (!chars->is_string()) f.fail("characters", "must be a string, got " + Fields::shown(*chars));
    const std::string& s = chars->get_ref<const std::string&>();
    std::vector<char32_t> vocabulary;
    for (std::size_t at = 0; at < s.size();) {
        const text::DecodedChar c = text::decode_utf8(s, at, source + ": field \"characters\"");
        if (!vocabulary.empty() && c.code <= vocabulary.back())
            f.fail("characters", "must list distinct characters in increasing code point order (byte " + std::to_string(at) + ")");
        vocabulary.push_back(c.code);
        at += c.length;
    }
    if (vocabulary.empty()) f.fail("characters", "is empty");
    return text::Tokenizer::from_vocabulary(std::move(vocabulary));
}

void write_folder_tokenizer(const fs::path& dir, const text::Tokenizer& tok) {
    const auto write = [&](const std::string& name, const std::string& text) {
        write_file_atomic(dir / name, text.data(), text.size());
    };
    if (const text::BpeModel* bpe = tok.bpe_model()) {
        write("vocab.json", bpe->vocab_json());
        write("merges.txt", bpe->merges_txt());
        return;
    }
    nlohmann::ordered_json j{{"version", 1}, {"kind", tok.kind() == text::Tokenizer::Kind::byte ? "byte" : "character"}};
    if (tok.kind() == text::Tokenizer::Kind::character) {
        std::string chars;
        for (const char32_t c : tok.vocabulary()) text::append_utf8(chars, c);
        j["characters"] = chars;
    }
    write(xgrad_tokenizer_file, j.dump(2) + "\n");
}

std::string gpt2_config_json(const nn::GPTConfig& c) {
    nlohmann::ordered_json j{{"model_type", "gpt2"},
                             {"architectures", nlohmann::ordered_json::array({"GPT2LMHeadModel"})},
                             {"n_layer", c.n_layer},
                             {"n_head", c.n_head},
                             {"n_embd", c.n_embd},
                             {"n_positions", c.block_size},
                             {"n_ctx", c.block_size},
                             {"vocab_size", c.vocab_size},
                             {"n_inner", nullptr},
                             {"activation_function", c.gelu == nn::GeluForm::tanh ? "gelu_new" : "gelu"},
                             {"layer_norm_epsilon", 1e-5},
                             {"resid_pdrop", c.dropout},
                             {"embd_pdrop", c.dropout},
                             {"attn_pdrop", c.dropout},
                             {"tie_word_embeddings", true}};
    if (!c.bias) j["bias"] = false;
    return j.dump(2) + "\n";
}

bool is_gpt_folder(const fs::path& dir) {
    std::error_code ec;
    return fs::is_directory(dir, ec) && fs::exists(dir / "config.json", ec) && fs::exists(dir / "model.safetensors", ec);
}

}  // namespace xgrad::io
