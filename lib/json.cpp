// libxgrad's JSON parsing and writing (lib/json.hpp), the one unit that compiles nlohmann-json's
// parser and serializer.
#include "json.hpp"

#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace xgrad::detail {

nlohmann::json parse_json_unique_keys(const char* begin, const char* end, const std::string& what) {
    std::vector<std::set<std::string>> keys;  // one set per open object
    std::string duplicate;
    const nlohmann::json::parser_callback_t check = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        using E = nlohmann::json::parse_event_t;
        if (event == E::object_start) keys.emplace_back();
        else if (event == E::object_end) keys.pop_back();
        else if (event == E::key && !keys.back().insert(parsed.get<std::string>()).second && duplicate.empty())
            duplicate = parsed.get<std::string>();
        return true;
    };
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(begin, end, check);
    } catch (const nlohmann::json::exception& e) {
        throw io_error(what + " is not valid JSON: " + e.what());
    }
    if (!duplicate.empty()) throw io_error(what + " names '" + duplicate + "' twice");
    return j;
}

std::optional<nlohmann::json> parse_json_or_none(std::string_view text) {
    nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded()) return std::nullopt;
    return j;
}

std::string json_text(const nlohmann::json& value) {
    return value.dump();
}

std::string json_text(const nlohmann::ordered_json& value, int indent) {
    return value.dump(indent);
}

}  // namespace xgrad::detail

namespace xgrad::io::detail {

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

void Fields::fail(const std::string& field, const std::string& what) const {
    throw io_error(source + ": field \"" + field + "\" " + what);
}

std::string Fields::shown(const nlohmann::json& v) {
    return v.is_structured() ? std::string("an ") + v.type_name() : v.dump();
}

const nlohmann::json* Fields::find(const std::string& field) const {
    const auto it = j.find(field);
    return it == j.end() ? nullptr : &*it;
}

std::size_t Fields::positive(const std::string& field) const {
    const nlohmann::json* v = find(field);
    if (!v) fail(field, "is missing");
    if (!v->is_number_integer() || v->get<long long>() <= 0 || v->get<long long>() > (1LL << 40))
        fail(field, "must be a positive integer, got " + shown(*v));
    return std::size_t(v->get<long long>());
}

void Fields::boolean_must_be(const std::string& field, bool supported, const std::string& why) const {
    const nlohmann::json* v = find(field);
    if (!v) return;
    if (!v->is_boolean()) fail(field, "must be true or false, got " + shown(*v));
    if (v->get<bool>() != supported) fail(field, "is " + shown(*v) + ": " + why);
}

}  // namespace xgrad::io::detail
