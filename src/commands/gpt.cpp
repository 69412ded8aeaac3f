// `xgrad gpt --from IN --to OUT`: one forward and backward of a GPT stored as nanoGPT's files.
//   IN/config.json  {"n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias": bool,
//                    "gelu": "erf" | "tanh"} (dropout 0)
//   IN/<name>.npy   every parameter under nanoGPT's state-dict names (float32 or float64, one dtype);
//                   buffers such as transformer.h.0.attn.bias.npy may be there (checked, not used)
//   IN/idx.npy, IN/targets.npy  int64 (B, T), T <= block_size; target -1 is ignored
// Writes OUT/logits.npy (B, T, vocab_size), OUT/loss.npy () (nanoGPT's mean cross-entropy) and
// OUT/grad.<name>.npy for every parameter (both tied names). Bad input: one line naming the file or
// field, exit status 2, nothing written.
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "commands/commands.hpp"
#include "study/json_config.hpp"
#include "study/npy_inputs.hpp"
#include "xgrad/io/file.hpp"
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

// IN/<name>.npy, int64 (B, T) with T in [1, block_size]
xt::xtensor<std::int64_t, 2> read_ids(const fs::path& in, const std::string& name, const nn::GPTConfig& c, bool targets) {
    const NpyArray a = *read_input(in, name);
    if (a.dtype != Dtype::int64) throw io_error(a.source + ": has dtype " + dtype_name(a.dtype) + ", expected int64");
    if (a.shape.size() != 2 || a.shape[0] == 0 || a.shape[1] == 0 || a.shape[1] > c.block_size)
        throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected (B, T) with 1 <= T <= block_size " +
                       std::to_string(c.block_size));
    auto ids = a.as<std::int64_t, 2>();
    for (std::size_t k = 0; k < ids.size(); ++k) {
        const std::int64_t v = ids.data()[k];
        if ((v < 0 && !(targets && v == -1)) || v >= std::int64_t(c.vocab_size))
            throw io_error(a.source + ": element " + std::to_string(k) + " is " + std::to_string(v) + ", outside [" +
                           (targets ? "-1 (ignored), 0" : "0") + ", " + std::to_string(c.vocab_size) + ")");
    }
    return ids;
}

template <Real T>
std::map<std::string, NpyArray> run_typed(const fs::path& in, const nn::GPTConfig& c, const std::string& first_source,
                                          const xt::xtensor<std::int64_t, 2>& idx,
                                          const xt::xtensor<std::int64_t, 2>& targets) {
    Generator gen(0);
    nn::GPT<T> model(c, gen);
    std::map<std::string, NpyArray> arrays;
    for_each_parameter_name(model, [&](const std::string& name, const auto& v) {
        NpyArray a = *read_input(in, name);
        expect_dtype<T>(a, first_source);
        expect_shape(a, std::vector<std::size_t>(v.shape().begin(), v.shape().end()), "(from config.json)");
        expect_finite(a);
        arrays.emplace(name, std::move(a));
    });
    for (const auto& entry : fs::directory_iterator(in))  // buffers: nanoGPT's causal masks, checked
        if (const std::string name = entry.path().stem().string(); io::detail::is_gpt_buffer(name))
            arrays.emplace(name, read_npy(entry.path()));
    io::load_gpt_state_dict(model, arrays, in.string());
    const Var<T, 3> logits = model(idx);
    const Var<T, 0> loss = nn::gpt_loss(logits, targets);
    backward(loss);
    std::map<std::string, NpyArray> files{{"logits", NpyArray::from(logits.value())}, {"loss", NpyArray::from(loss.value())}};
    for_each_parameter_name(model, [&](const std::string& name, const auto& v) {
        files["grad." + name] = NpyArray::from(v.grad());
    });
    return files;
}

void run_gpt(const fs::path& in, const fs::path& out) {
    io::StagingDir::check_target(out);
    const nn::GPTConfig c = read_gpt_config(in / "config.json");
    const auto idx = read_ids(in, "idx", c, false), targets = read_ids(in, "targets", c, true);
    if (idx.shape() != targets.shape())
        throw io_error((in / "targets.npy").string() + ": has shape " + shape_str(targets.shape()) + ", idx.npy has " +
                       shape_str(idx.shape()));
    const NpyArray first = *read_input(in, "transformer.wte.weight");
    std::map<std::string, NpyArray> files;
    if (first.dtype == Dtype::float32) files = run_typed<float>(in, c, first.source, idx, targets);
    else if (first.dtype == Dtype::float64) files = run_typed<double>(in, c, first.source, idx, targets);
    else throw io_error(first.source + ": has dtype " + dtype_name(first.dtype) + ", expected float32 or float64");
    io::StagingDir stage(out);
    for (const auto& [name, a] : files) io::write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace

void setup_gpt(CLI::App& cmd) {
    static std::string from, to;
    cmd.add_option("--from", from, "input directory: config.json, the parameters under nanoGPT's names, idx.npy and "
                                   "targets.npy")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            run_gpt(from, to);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
