// Reading a Llama given as llama2.c's files (study/llama_files.hpp).
#include "study/llama_files.hpp"

#include <map>
#include <set>
#include <string>

#include "study/json_config.hpp"
#include "study/npy_inputs.hpp"
#include "xgrad/io/state_dict.hpp"

namespace xgrad::cli {
namespace {

nn::LlamaConfig read_llama_config(const fs::path& path) {
    const std::string source = path.string();
    const nlohmann::json j = parse_config_object(read_config_text(path), source);
    static const std::set<std::string> fields{"dim",         "n_layers", "n_heads",    "n_kv_heads", "vocab_size",
                                              "hidden_dim",  "multiple_of", "norm_eps", "max_seq_len", "dropout"};
    for (const auto& [key, value] : j.items())
        if (!fields.count(key)) throw io_error(source + ": unknown field \"" + key + "\"");
    const ConfigReader r(j, source);
    nn::LlamaConfig c;
    c.dim = r.positive("dim"), c.n_layers = r.positive("n_layers"), c.n_heads = r.positive("n_heads");
    c.vocab_size = r.positive("vocab_size"), c.multiple_of = r.positive("multiple_of");
    c.max_seq_len = r.positive("max_seq_len");
    if (r.has("n_kv_heads")) c.n_kv_heads = r.positive("n_kv_heads");
    if (r.has("hidden_dim")) c.hidden_dim = r.positive("hidden_dim");
    c.norm_eps = r.number("norm_eps");
    if (c.norm_eps < 0) r.fail("norm_eps", "must be >= 0, got " + std::to_string(c.norm_eps));
    if (r.has("dropout") && r.number("dropout") != 0) r.fail("dropout", "must be 0: one deterministic step");
    if (c.dim % c.n_heads != 0)
        r.fail("n_heads", "must divide dim " + std::to_string(c.dim) + ", got " + std::to_string(c.n_heads));
    if ((c.dim / c.n_heads) % 2 != 0)
        r.fail("n_heads", "must leave an even head size (the rotary embedding turns pairs); dim / n_heads is " +
                              std::to_string(c.dim / c.n_heads));
    if (c.n_heads % c.kv_heads() != 0)
        r.fail("n_kv_heads", "must divide n_heads " + std::to_string(c.n_heads) + ", got " + std::to_string(c.kv_heads()));
    return c;
}

template <Real T>
nn::Llama<T> read_model(const fs::path& in, const nn::LlamaConfig& c, const std::string& first_source) {
    Generator gen(0);
    nn::Llama<T> model(c, gen);
    io::load_state_dict(model, read_parameter_files<T>(in, model, first_source), {}, in.string());
    set_training(model, false);
    return model;
}

}  // namespace

LlamaFiles read_llama_files(const fs::path& in) {
    const nn::LlamaConfig c = read_llama_config(in / "config.json");
    auto [idx, targets] = read_idx_targets(in, c.max_seq_len, "max_seq_len", c.vocab_size);
    const NpyArray first = *read_input(in, "tok_embeddings.weight");
    if (first.dtype == Dtype::float32) return {c, std::move(idx), std::move(targets), read_model<float>(in, c, first.source)};
    if (first.dtype == Dtype::float64) return {c, std::move(idx), std::move(targets), read_model<double>(in, c, first.source)};
    throw io_error(first.source + ": has dtype " + dtype_name(first.dtype) + ", expected float32 or float64");
}

}  // namespace xgrad::cli
