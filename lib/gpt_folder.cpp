// GPT-2 in Hugging Face's folder layout (xgrad/io/gpt_folder.hpp): config.json, model.safetensors
// and the BPE files, read and checked against each other.
#include "xgrad/io/gpt_folder.hpp"

#include <vector>

#include "json.hpp"
#include "xgrad/io/safetensors.hpp"

namespace xgrad::io {

namespace fs = std::filesystem;
using detail::Fields;
using detail::read_text;
using xgrad::detail::json_text;

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
    const fs::path file = dir / (tok.kind() == text::Tokenizer::Kind::bpe             ? "vocab.json"
                                 : tok.kind() == text::Tokenizer::Kind::sentencepiece ? sentencepiece_file
                                                                                      : xgrad_tokenizer_file);
    if (tok.vocab_size() > c.vocab_size)
        throw io_error(file.string() + ": " + std::to_string(tok.vocab_size()) + " tokens, more than " +
                       (dir / "config.json").string() + "'s vocab_size " + std::to_string(c.vocab_size));
    return tok;
}

text::Tokenizer read_folder_tokenizer(const fs::path& dir) {
    std::error_code ec;
    const fs::path path = dir / xgrad_tokenizer_file;
    if (!fs::exists(path, ec) && fs::exists(dir / sentencepiece_file, ec))
        return text::Tokenizer::sentencepiece(dir / sentencepiece_file);
    if (!fs::exists(path, ec)) return text::Tokenizer::bpe_folder(dir);
    const std::string source = path.string(), text = read_text(path);
    const nlohmann::json j = xgrad::detail::parse_json_unique_keys(text.data(), text.data() + text.size(), source);
    if (!j.is_object()) throw io_error(source + ": must hold a JSON object, got " + std::string(j.type_name()));
    const Fields f{j, source};
    if (f.positive("version") != 1) f.fail("version", "is " + json_text(j["version"]) + "; this xgrad reads version 1");
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
    if (const text::SentencePieceModel* sentencepiece = tok.sentencepiece_model()) {
        write(sentencepiece_file, sentencepiece->serialized());
        return;
    }
    nlohmann::ordered_json j{{"version", 1}, {"kind", tok.kind() == text::Tokenizer::Kind::byte ? "byte" : "character"}};
    if (tok.kind() == text::Tokenizer::Kind::character) {
        std::string chars;
        for (const char32_t c : tok.vocabulary()) text::append_utf8(chars, c);
        j["characters"] = chars;
    }
    write(xgrad_tokenizer_file, json_text(j, 2) + "\n");
}

bool is_gpt_folder(const fs::path& dir) {
    std::error_code ec;
    return fs::is_directory(dir, ec) && fs::exists(dir / "config.json", ec) && fs::exists(dir / "model.safetensors", ec);
}

}  // namespace xgrad::io
