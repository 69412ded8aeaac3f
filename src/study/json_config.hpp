// The JSON configs of the commands that read a problem from a folder (nlohmann-json): the reader
// `xgrad attention` and `xgrad transformer` (study/transformer.cpp) both use, and the config of
// `xgrad attention`, parsed into the library's MultiheadAttentionOptions:
//
//   {"embed_dim": 4, "num_heads": 2, "bias": true, "add_bias_kv": false, "add_zero_attn": false,
//    "kdim": null, "vdim": 3, "batch_first": false, "need_weights": true, "average_attn_weights": true}
//
// Every field is required; unknown fields, wrong JSON types and inconsistent values are io_errors
// naming the file and the field.
#pragma once
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "xgrad/core/error.hpp"
#include "xgrad/nn/attention_options.hpp"

namespace xgrad::cli {

struct AttentionConfig {
    nn::MultiheadAttentionOptions mha;
    bool need_weights = true;
    bool average_attn_weights = true;
};

namespace detail {
inline const char* const attention_config_fields[] = {"embed_dim",   "num_heads", "bias", "add_bias_kv",
                                                      "add_zero_attn", "kdim",    "vdim", "batch_first",
                                                      "need_weights",  "average_attn_weights"};
}  // namespace detail

// A config's fields, checked one by one: an io_error names the config (`source`) and the field.
class ConfigReader {
public:
    ConfigReader(const nlohmann::json& j, const std::string& source) : j_(j), src_(source) {}

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw io_error(src_ + ": field \"" + field + "\" " + what);
    }
    // The offending value for a message: a scalar as JSON, an array or object by its type only
    // (dump() recurses, and a deeply nested value would overflow the stack).
    static std::string shown(const nlohmann::json& v) {
        return v.is_structured() ? std::string("an ") + v.type_name() : v.dump();
    }
    const nlohmann::json& get(const std::string& field) const {
        const auto it = j_.find(field);
        if (it == j_.end()) fail(field, "is missing");
        return *it;
    }
    bool boolean(const std::string& field) const {
        const auto& v = get(field);
        if (!v.is_boolean()) fail(field, "must be true or false, got " + shown(v));
        return v.get<bool>();
    }
    std::size_t positive(const std::string& field) const {
        const auto& v = get(field);
        if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > (1LL << 40))
            fail(field, "must be a positive integer, got " + shown(v));
        return std::size_t(v.get<long long>());
    }
    // The field is there and not null.
    bool has(const std::string& field) const { return j_.contains(field) && !j_.at(field).is_null(); }
    double number(const std::string& field) const {
        const auto& v = get(field);
        if (!v.is_number() || !std::isfinite(v.get<double>())) fail(field, "must be a finite number, got " + shown(v));
        return v.get<double>();
    }
    std::optional<std::size_t> positive_or_null(const std::string& field) const {
        if (get(field).is_null()) return std::nullopt;
        const auto& v = get(field);
        if (!v.is_number_integer() || v.get<long long>() <= 0 || v.get<long long>() > (1LL << 40))
            fail(field, "must be a positive integer or null, got " + shown(v));
        return std::size_t(v.get<long long>());
    }

private:
    const nlohmann::json& j_;
    const std::string& src_;
};

// The text of a config file; io_error naming it when it cannot be read.
inline std::string read_config_text(const std::filesystem::path& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) throw io_error(path.string() + ": no such file");
    std::ifstream in(path);
    if (!in) throw io_error(path.string() + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw io_error(path.string() + ": read failed");
    return text.str();
}

// A config's JSON object; io_error naming `source` when the text is not one.
inline nlohmann::json parse_config_object(const std::string& text, const std::string& source) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
        throw io_error(source + ": malformed JSON: " + e.what());
    }
    if (!j.is_object()) throw io_error(source + ": the config must be a JSON object, got " + std::string(j.type_name()));
    return j;
}

// Parses config text; `source` names it (the file) in error messages.
inline AttentionConfig parse_attention_config(const std::string& text, const std::string& source) {
    const nlohmann::json j = parse_config_object(text, source);
    for (const auto& [key, value] : j.items()) {
        bool known = false;
        for (const char* f : detail::attention_config_fields) known = known || key == f;
        if (!known) throw io_error(source + ": unknown field \"" + key + "\"");
    }
    const ConfigReader r(j, source);
    AttentionConfig c;
    c.mha.embed_dim = r.positive("embed_dim");
    c.mha.num_heads = r.positive("num_heads");
    c.mha.bias = r.boolean("bias");
    c.mha.add_bias_kv = r.boolean("add_bias_kv");
    c.mha.add_zero_attn = r.boolean("add_zero_attn");
    c.mha.kdim = r.positive_or_null("kdim");
    c.mha.vdim = r.positive_or_null("vdim");
    c.mha.batch_first = r.boolean("batch_first");
    c.need_weights = r.boolean("need_weights");
    c.average_attn_weights = r.boolean("average_attn_weights");
    if (c.mha.embed_dim % c.mha.num_heads != 0)
        r.fail("embed_dim", "(" + std::to_string(c.mha.embed_dim) + ") must be divisible by num_heads (" +
                                std::to_string(c.mha.num_heads) + ")");
    return c;
}

inline AttentionConfig read_attention_config(const std::filesystem::path& path) {
    return parse_attention_config(read_config_text(path), path.string());
}

}  // namespace xgrad::cli
