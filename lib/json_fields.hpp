// libxgrad's readers of JSON files in model folders (config.json, xgrad_tokenizer.json): a file's
// text, and checked access to one field at a time, every problem naming the file and the field.
#pragma once
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "json_unique.hpp"

namespace xgrad::io::detail {

namespace fs = std::filesystem;

inline std::string read_text(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) throw io_error(path.string() + ": no such file");
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in || in.bad()) throw io_error(path.string() + ": cannot be read");
    return text.str();
}

// One field of a JSON object at a time; every problem names the file and the field.
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

}  // namespace xgrad::io::detail
