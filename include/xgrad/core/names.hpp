// The module paths of recorded nodes, the names tape listings show (inspect/tape_graph.hpp,
// `xgrad inspect`): while a NameScope lives, named() prefixes its parts, so a stack's layers are
// told apart ("encoder.layers.0.self_attn.output"). A module opens one, named as the child in its
// state dict, around each child it calls. The parts are views of strings that outlive the scope
// (literals, index_name); a steady step allocates nothing.
#pragma once
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace xgrad {

class NameScope {
public:
    explicit NameScope(std::string_view part) { parts().push_back(part); }
    ~NameScope() { parts().pop_back(); }
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;
    static std::vector<std::string_view>& parts() {
        thread_local std::vector<std::string_view> stack;  // pop_back keeps the capacity
        return stack;
    }
};

// "0", "1", ...: an index as a NameScope part (made once per index and thread, then kept).
inline std::string_view index_name(std::size_t i) {
    thread_local std::deque<std::string> names;  // a deque: growing it moves no string
    while (names.size() <= i) names.push_back(std::to_string(names.size()));
    return names[i];
}

// Names v's node for tape listings: "weights", "query", under the open NameScopes
// ("decoder.layers.1.multihead_attn.weights"). v is a Var (an empty one is left alone). Returns v.
template <class V>
    requires requires(const V& v) { v.node()->label; }
V named(const V& v, std::string_view name) {
    if (!v) return v;
    std::string& label = v.node()->label;  // a reused node keeps its label's capacity
    label.clear();
    for (const std::string_view part : NameScope::parts()) label.append(part).append(1, '.');
    label.append(name);
    return v;
}

}  // namespace xgrad
