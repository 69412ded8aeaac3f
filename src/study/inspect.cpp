// `xgrad inspect`'s driver (study/inspect.hpp): the tape listing, the dot file and the dump.
#include "study/inspect.hpp"

#include <cctype>
#include <sstream>
#include <string>
#include <type_traits>
#include <variant>

#include "study/mha_files.hpp"
#include "study/transformer.hpp"
#include "xgrad/inspect/tape_graph.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"

namespace xgrad::cli {
namespace {

io::NpyArray npy_of(const ArrayView& a) {
    io::NpyArray out;
    out.dtype = a.is_double ? io::Dtype::float64 : io::Dtype::float32;
    out.shape = a.shape;
    std::size_t n = io::itemsize(out.dtype);
    for (std::size_t d : a.shape) n *= d;
    const auto* p = static_cast<const std::byte*>(a.data);
    out.bytes.assign(p, p + n);
    return out;
}

// A node name as a file name: letters, digits, '.', '-' and '_' kept, anything else '_'.
std::string file_stem(const std::string& name) {
    std::string s = name;
    for (char& c : s)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
    return s;
}

// Writes every value and gradient of g into `stage` (see the top of this file).
void dump_graph(const TapeGraph& g, const io::StagingDir& stage) {
    auto write = [&](const std::string& stem, const ArrayView& value, const ArrayView& grad) {
        io::write_npy(stage.file(stem + ".npy"), npy_of(value));
        if (grad.data) io::write_npy(stage.file(stem + ".grad.npy"), npy_of(grad));
    };
    for (std::size_t k = 0; k < g.entries().size(); ++k) {
        const auto& e = g.entries()[k];
        std::string stem = file_stem(e.is_op && e.node->label.empty() ? e.node->op_name() : e.name);
        if (e.is_op) {
            const std::string pos = std::to_string(k - g.leaf_count());
            stem = std::string(pos.size() < 2 ? 2 - pos.size() : 0, '0') + pos + "-" + stem;
        }
        write(stem, e.node->value_view(), e.node->grad_view());
        e.node->for_each_internal([&](const char* name, const char*, const ArrayView& value, const ArrayView& grad) {
            write(stem + "." + file_stem(name), value, grad);
        });
    }
}

// Prints the header and the tape's forward and backward listings; writes the dot file and the dump.
void print_tape(const Tape& tape, const std::string& header, std::ostream& os, const InspectOptions& opt) {
    os << header << "\n\n";
    const TapeGraph g(tape);
    print_forward(os, g);
    os << '\n';
    print_backward(os, g);
    // The dump goes to a staging folder renamed after the dot file is written (both parents were
    // checked first; only a failing rename could leave the dot file without the dump).
    std::optional<io::StagingDir> stage;
    if (opt.dump) dump_graph(g, stage.emplace(*opt.dump));
    if (opt.dot) {
        std::ostringstream dot;
        write_dot(dot, g);
        const std::string text = dot.str();
        io::write_file_atomic(*opt.dot, text.data(), text.size());
    }
    if (stage) stage->commit();
}

template <Real T, std::size_t N>
void inspect_problem(AttentionProblem<T, N>& p, std::ostream& os, const InspectOptions& opt) {
    Tape tape;
    TapeScope on(tape);
    const bool self_attention = p.key == p.query && p.value == p.query;
    const auto query = named(parameter(p.query), self_attention ? "x" : "query");
    const auto key = self_attention ? query : named(parameter(p.key), "key");
    const auto value = self_attention ? query : named(parameter(p.value), "value");
    for_each_parameter(p.mha, [](const std::string& name, const auto& var) { named(var, name); });
    const auto r = p.mha.forward(query, key, value, p.forward_options);
    backward(r.output, p.grad_output);

    const auto& o = p.mha.options;
    std::ostringstream header;
    header << "MultiheadAttention embed_dim=" << o.embed_dim << " num_heads=" << o.num_heads << ", "
           << (self_attention ? "self-attention on x " : "query ") << shape_str(p.query.shape()) << " "
           << (std::is_same_v<T, double> ? "float64" : "float32") << "; backward from output with grad_output.npy";
    print_tape(tape, header.str(), os, opt);
}

}  // namespace

void run_inspect(const std::filesystem::path& in, std::ostream& os, const InspectOptions& opt) {
    auto check_outputs = [&] {
        if (opt.dot) io::require_parent_dir(*opt.dot);
        if (opt.dump) io::StagingDir::check_target(*opt.dump);
    };
    std::ostringstream text;  // printed only when everything worked
    if (is_transformer_folder(in)) {  // the folder format of `xgrad transformer`
        check_outputs();
        Tape tape;
        TapeScope on(tape);
        const TransformerResults r = compute_transformer(in);
        print_tape(tape, r.description, text, opt);
    } else {
        auto problem = load_attention_problem(in);
        check_outputs();
        std::visit([&](auto& p) { inspect_problem(p, text, opt); }, problem);
    }
    os << text.str();
}

}  // namespace xgrad::cli
