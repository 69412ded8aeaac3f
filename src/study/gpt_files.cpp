// Reading a GPT given as nanoGPT's files (study/gpt_files.hpp).
#include "study/gpt_files.hpp"

#include <set>
#include <string>

#include "study/json_config.hpp"
#include "study/npy_inputs.hpp"
#include "xgrad/io/gpt_folder.hpp"
#include "xgrad/io/gpt_formats.hpp"

namespace xgrad::cli {
namespace {

nn::GPTConfig read_gpt_config(const fs::path& path) {
    const std::string source = path.string();
    const nlohmann::json j = parse_config_object(read_config_text(path), source);
    static const std::set<std::string> fields{"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias", "gelu"};
    for (const auto& [key, value] : j.items())
        if (!fields.count(key)) throw io_error(source + ": unknown field \"" + key + "\"");
    const ConfigReader r(j, source);
    nn::GPTConfig c;
    c.n_layer = r.positive("n_layer"), c.n_head = r.positive("n_head"), c.n_embd = r.positive("n_embd");
    c.block_size = r.positive("block_size"), c.vocab_size = r.positive("vocab_size"), c.bias = r.boolean("bias");
    const auto& gelu = r.get("gelu");
    if (gelu != "erf" && gelu != "tanh") r.fail("gelu", "must be \"erf\" or \"tanh\", got " + ConfigReader::shown(gelu));
    c.gelu = gelu == "tanh" ? nn::GeluForm::tanh : nn::GeluForm::erf;
    if (c.n_embd % c.n_head != 0)
        r.fail("n_head", "must divide n_embd " + std::to_string(c.n_embd) + ", got " + std::to_string(c.n_head));
    return c;
}

}  // namespace

xt::xtensor<std::int64_t, 2> read_gpt_ids(const fs::path& in, const std::string& name, const nn::GPTConfig& c,
                                          bool targets) {
    return read_token_ids(in, name, c.block_size, "block_size", c.vocab_size, targets);
}

namespace {

template <Real T>
nn::GPT<T> read_model(const fs::path& in, const nn::GPTConfig& c, const std::string& first_source) {
    Generator gen(0);
    nn::GPT<T> model(c, gen);
    auto arrays = read_parameter_files<T>(in, model, first_source);
    for (const auto& entry : fs::directory_iterator(in))  // buffers: nanoGPT's causal masks, checked
        if (const std::string name = entry.path().stem().string(); io::detail::is_gpt_buffer(name))
            arrays.emplace(name, read_npy(entry.path()));
    io::load_gpt_state_dict(model, arrays, in.string());
    set_training(model, false);
    return model;
}

// IN/idx.npy and IN/targets.npy for a model of config c
std::pair<xt::xtensor<std::int64_t, 2>, xt::xtensor<std::int64_t, 2>> read_inputs(const fs::path& in, const nn::GPTConfig& c) {
    return read_idx_targets(in, c.block_size, "block_size", c.vocab_size);
}

}  // namespace

GptFiles read_gpt_files(const fs::path& in, const fs::path& model_dir) {
    const nn::GPTConfig c = io::read_gpt2_config(model_dir / "config.json");
    auto [idx, targets] = read_inputs(in, c);
    return {c, std::move(idx), std::move(targets), io::open_gpt_folder<float>(model_dir).model};
}

namespace {
// The parameters of a model of config c, in their files' dtype.
GptModel read_parameters(const fs::path& in, const nn::GPTConfig& c) {
    const NpyArray first = *read_input(in, "transformer.wte.weight");
    if (first.dtype == Dtype::float32) return read_model<float>(in, c, first.source);
    if (first.dtype == Dtype::float64) return read_model<double>(in, c, first.source);
    throw io_error(first.source + ": has dtype " + dtype_name(first.dtype) + ", expected float32 or float64");
}
}  // namespace

std::pair<nn::GPTConfig, GptModel> read_gpt_model(const fs::path& in) {
    const nn::GPTConfig c = read_gpt_config(in / "config.json");
    return {c, read_parameters(in, c)};
}

GptFiles read_gpt_files(const fs::path& in) {
    const nn::GPTConfig c = read_gpt_config(in / "config.json");
    auto [idx, targets] = read_inputs(in, c);  // the inputs' errors before the model's
    return {c, std::move(idx), std::move(targets), read_parameters(in, c)};
}

}  // namespace xgrad::cli
