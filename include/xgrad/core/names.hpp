// The module paths of recorded nodes and of hook points. While a NameScope lives, named() prefixes
// its parts to the tape listings' names (inspect/tape_graph.hpp, `xgrad inspect`), so a stack's
// layers are told apart ("encoder.layers.0.self_attn.output"), and hook_point() (ops/hook_point.hpp)
// prefixes them to hook names ("encoder.layers.0.self_attn.hook_pattern"). A module opens one, named
// as the child in its state dict, around each child it calls. Where the two names differ (nn::GPT:
// the state dict's "transformer.h.0", TransformerLens's hook names "blocks.0"), the scope takes both
// parts; an empty part is left out of its path. The parts are views of strings that outlive the
// scope (literals, index_name); a steady step allocates nothing.
#pragma once
#include <cstddef>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace xgrad {

class NameScope {
public:
    // The same part for node names and hook names.
    explicit NameScope(std::string_view part) : NameScope(part, part) {}
    NameScope(std::string_view node_part, std::string_view hook_part)
        : node_(!node_part.empty()), hook_(!hook_part.empty()) {
        if (node_) parts().push_back(node_part);
        if (hook_) hook_parts().push_back(hook_part);
    }
    ~NameScope() {
        if (node_) parts().pop_back();
        if (hook_) hook_parts().pop_back();
    }
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;
    // The open parts of node names and of hook names, outermost first.
    static std::vector<std::string_view>& parts() { return stack<0>(); }
    static std::vector<std::string_view>& hook_parts() { return stack<1>(); }

private:
    template <int Kind>
    static std::vector<std::string_view>& stack() {
        thread_local std::vector<std::string_view> parts;  // pop_back keeps the capacity
        return parts;
    }
    bool node_, hook_;
};

// "0", "1", ...: an index as a NameScope part (made once per index and thread, then kept).
inline std::string_view index_name(std::size_t i) {
    thread_local std::deque<std::string> names;  // a deque: growing it moves no string
    while (names.size() <= i) names.push_back(std::to_string(names.size()));
    return names[i];
}

// Writes parts joined by '.', then name, into out (its capacity kept).
inline void write_path(std::string& out, const std::vector<std::string_view>& parts, std::string_view name) {
    out.clear();
    for (const std::string_view part : parts) out.append(part).append(1, '.');
    out.append(name);
}

// Names v's node for tape listings: "weights", "query", under the open NameScopes
// ("decoder.layers.1.multihead_attn.weights"). v is a Var (an empty one is left alone). Returns v.
template <class V>
    requires requires(const V& v) { v.node()->label; }
V named(const V& v, std::string_view name) {
    if (v) write_path(v.node()->label, NameScope::parts(), name);  // a reused node keeps its label's capacity
    return v;
}

}  // namespace xgrad
