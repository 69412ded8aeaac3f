// nlohmann-json parsing that refuses a name given twice in one object (libxgrad's readers of
// safetensors headers and BPE vocabularies): nlohmann keeps one of them, which would hide an entry.
#pragma once
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

// The JSON text [begin, end) of `what` ("file: the header"); io_error "what is not valid JSON: ..."
// or "what names 'key' twice".
inline nlohmann::json parse_json_unique_keys(const char* begin, const char* end, const std::string& what) {
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

}  // namespace xgrad::detail
