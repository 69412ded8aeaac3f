// libxgrad's readers and writers of JSON (safetensors headers, config.json, vocab.json,
// xgrad_tokenizer.json) with nlohmann-json. Its parser and serializer are compiled once, in
// lib/json.cpp: the other units call the functions below instead of json::parse and dump().
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

// The JSON text [begin, end) of `what` ("file: the header"); io_error "what is not valid JSON: ..."
// or "what names 'key' twice" (nlohmann keeps one of the two, which would hide an entry).
nlohmann::json parse_json_unique_keys(const char* begin, const char* end, const std::string& what);
// The JSON text, or nothing when it is not valid JSON.
std::optional<nlohmann::json> parse_json_or_none(std::string_view text);
// The value as JSON text: on one line, or indented by `indent` spaces a level.
std::string json_text(const nlohmann::json& value);
std::string json_text(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace xgrad::detail

namespace xgrad::io::detail {

// A file's whole text; io_error naming the file when it is missing or cannot be read.
std::string read_text(const std::filesystem::path& path);

// One field of a JSON object at a time; every problem names the file and the field.
struct Fields {
    const nlohmann::json& j;
    const std::string& source;

    [[noreturn]] void fail(const std::string& field, const std::string& what) const;
    // How a value is named in a message: its text, or "an object" / "an array".
    static std::string shown(const nlohmann::json& v);
    const nlohmann::json* find(const std::string& field) const;
    // A positive integer field (at most 2^40); fails when it is missing.
    std::size_t positive(const std::string& field) const;
    // An optional boolean that the model supports with one value only.
    void boolean_must_be(const std::string& field, bool supported, const std::string& why) const;
};

}  // namespace xgrad::io::detail
