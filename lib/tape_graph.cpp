// The tape printer (include/xgrad/inspect/tape_graph.hpp): the graph of a recorded forward and
// backward as tables and as Graphviz.
#include "xgrad/inspect/tape_graph.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <utility>

#include "xgrad/core/names.hpp"

namespace xgrad {
namespace {
// prefix followed by i ("#3", "leaf 0"), appended: g++ 12 warns falsely (-Wrestrict) about "#" + string
std::string numbered(const char* prefix, std::size_t i) {
    std::string name = prefix;
    name += std::to_string(i);
    return name;
}
}  // namespace

TapeGraph::TapeGraph(const Tape& tape) {
    std::vector<Entry> ops;
    std::map<const Node*, std::size_t> op_of, leaf_of;  // node -> index in ops / in entries_
    for (std::size_t i = 0; i < tape.size(); ++i) {
        const Node& n = tape[i];
        op_of[&n] = i;
        ops.push_back({&n, true, {}, n.label.empty() ? numbered("#", i) : n.label});
    }
    // Leaves first, so an input always precedes its op; op inputs are patched once the count is known.
    std::vector<std::vector<std::pair<bool, std::size_t>>> op_inputs(ops.size());  // (is_op, index)
    for (std::size_t i = 0; i < ops.size(); ++i)
        ops[i].node->for_each_input([&](const Node& in) {
            if (auto it = op_of.find(&in); it != op_of.end()) return op_inputs[i].push_back({true, it->second});
            auto [it, added] = leaf_of.try_emplace(&in, entries_.size());
            if (added) {
                const std::string fallback = numbered("leaf ", entries_.size());
                entries_.push_back({&in, false, {}, in.label.empty() ? fallback : in.label});
            }
            op_inputs[i].push_back({false, it->second});
        });
    leaves_ = entries_.size();
    for (std::size_t i = 0; i < ops.size(); ++i) {
        for (const auto& [is_op, k] : op_inputs[i]) ops[i].inputs.push_back(is_op ? leaves_ + k : k);
        entries_.push_back(std::move(ops[i]));
    }
}

namespace {

// The largest |x| of a float or double array (NaN if it holds one); 0 when it is empty or absent.
double max_abs(const ArrayView& a) {
    if (!a.data) return 0;
    std::size_t n = 1;
    for (std::size_t d : a.shape) n *= d;
    double m = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double x = a.is_double ? static_cast<const double*>(a.data)[i] : static_cast<const float*>(a.data)[i];
        if (std::isnan(x)) return x;
        m = std::max(m, std::abs(x));
    }
    return m;
}

std::string sci(double x) {
    std::ostringstream s;
    s << std::scientific << std::setprecision(2) << x;
    return s.str();
}

// Prints rows as columns padded to their widest cell (the last column is not padded).
void print_table(std::ostream& os, const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
    std::vector<std::size_t> width;
    for (const auto& r : rows)
        for (std::size_t c = 0; c < r.size(); ++c) {
            if (width.size() <= c) width.push_back(0);
            width[c] = std::max(width[c], r[c].size());
        }
    for (const auto& r : rows) {
        std::string line = indent;
        for (std::size_t c = 0; c < r.size(); ++c)
            line += c + 1 < r.size() ? r[c] + std::string(width[c] - r[c].size() + 2, ' ') : r[c];
        while (!line.empty() && line.back() == ' ') line.pop_back();
        os << line << '\n';
    }
}

std::string dot_escape(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out;
}

}  // namespace

// The forward: leaves, then every op in recording order with its name, shape and inputs; a fused
// op's internal steps (the scores inside attention_weights) are listed under it.
void print_forward(std::ostream& os, const TapeGraph& g) {
    std::vector<std::vector<std::string>> rows{{"#", "op", "name", "shape", "inputs"}};
    std::size_t op_index = 0;
    for (const auto& e : g.entries()) {
        std::string inputs;
        for (std::size_t k : e.inputs) inputs += (inputs.empty() ? "" : ", ") + g.entries()[k].name;
        rows.push_back({e.is_op ? std::to_string(op_index++) : "-", e.node->op_name(), e.name,
                        shape_str(e.node->value_view().shape), inputs});
        e.node->for_each_internal([&](const char* name, const char* formula, const ArrayView& value, const ArrayView&) {
            rows.push_back({"", "  (inside)", e.name + "." + name, shape_str(value.shape), formula});
        });
    }
    os << "forward: " << g.leaf_count() << " leaves, " << g.op_count() << " ops on the tape\n";
    print_table(os, rows, "  ");
}

// The backward: the ops a gradient reached, last recorded first (the order backward runs them),
// each with the gradient it received and the gradients it passed to its inputs; then the leaves'
// gradients. max|g| is the largest magnitude in the gradient.
void print_backward(std::ostream& os, const TapeGraph& g) {
    std::vector<std::vector<std::string>> rows{{"#", "op", "gradient of", "shape", "max|g|", "passes gradients to"}};
    std::size_t reached = 0;
    for (std::size_t i = g.op_count(); i-- > 0;) {
        const auto& e = g.op(i);
        if (!e.node->has_grad()) continue;
        ++reached;
        std::string to;
        for (std::size_t k : e.inputs) {
            const auto& in = g.entries()[k];
            if (in.node->requires_grad) to += (to.empty() ? "" : ", ") + in.name;
        }
        const ArrayView grad = e.node->grad_view();
        rows.push_back({std::to_string(i), e.node->op_name(), e.name, shape_str(grad.shape),
                        sci(max_abs(grad)), to.empty() ? "(nothing requires grad)" : to});
        e.node->for_each_internal([&](const char* name, const char*, const ArrayView&, const ArrayView& grad_inside) {
            rows.push_back({"", "  (inside)", e.name + "." + name, shape_str(grad_inside.shape),
                            sci(max_abs(grad_inside)), "computed inside " + e.name});
        });
    }
    os << "backward: " << reached << " of " << g.op_count() << " ops reached, last recorded first\n";
    print_table(os, rows, "  ");
    std::vector<std::vector<std::string>> leaves{{"leaf", "kind", "gradient shape", "max|g|"}};
    for (std::size_t k = 0; k < g.leaf_count(); ++k) {
        const auto& e = g.entries()[k];
        const bool has = e.node->has_grad();
        leaves.push_back({e.name, e.node->op_name(), has ? shape_str(e.node->grad_view().shape) : "none",
                          has ? sci(max_abs(e.node->grad_view())) : "-"});
    }
    os << "leaf gradients:\n";
    print_table(os, leaves, "  ");
}

// The graph in Graphviz dot: leaves as boxes (parameters filled), ops as ellipses labelled with
// tape position, op, name and shape (grey when no gradient reached them); an edge input -> op,
// dashed when no gradient flows along it.
void write_dot(std::ostream& os, const TapeGraph& g) {
    os << "digraph tape {\n  rankdir=TB;\n  node [fontname=\"DejaVu Sans\", fontsize=10];\n";
    std::size_t op_index = 0;
    for (std::size_t k = 0; k < g.entries().size(); ++k) {
        const auto& e = g.entries()[k];
        const std::string shape = shape_str(e.node->value_view().shape);
        if (e.is_op)  // an op no gradient reached is grey
            os << "  n" << k << " [shape=ellipse" << (e.node->has_grad() ? "" : ", color=grey50, fontcolor=grey40")
               << ", label=\"#" << op_index++ << " " << dot_escape(e.node->op_name()) << "\\n"
               << (e.node->label.empty() ? "" : dot_escape(e.name) + " ") << shape << "\"];\n";
        else
            os << "  n" << k << " [shape=box" << (e.node->requires_grad ? ", style=filled, fillcolor=\"#dbe8f6\"" : "")
               << ", label=\"" << dot_escape(e.name) << "\\n" << e.node->op_name() << " " << shape << "\"];\n";
    }
    for (std::size_t k = 0; k < g.entries().size(); ++k)
        for (std::size_t in : g.entries()[k].inputs)
            os << "  n" << in << " -> n" << k << (g.entries()[in].node->requires_grad ? "" : " [style=dashed]") << ";\n";
    os << "}\n";
}


}  // namespace xgrad
