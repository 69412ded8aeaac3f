// `xgrad patch --from IN --to OUT`: activation patching, attribution patching, direct logit
// attribution, the logit lens and integrated gradients (inspect/patching.hpp, inspect/attribution.hpp)
// of a GPT given as nanoGPT's files (study/gpt_files.hpp) on a clean and a corrupted input:
//   IN/config.json, IN/<name>.npy      the model, as `xgrad gpt` reads it
//   IN/clean.npy, IN/corrupt.npy       int64 (B, T), the same shape
//   IN/metric.json                     {"kind": "logit_diff", "correct": [B ids], "wrong": [B ids]}
//                                      (at position T - 1) or {"kind": "loss"} with IN/targets.npy
// OUT: float64 .npy files (docs/cli.md lists them). Bad input: one line naming the file or field,
// exit status 2, nothing written.
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "commands/commands.hpp"
#include "study/gpt_files.hpp"
#include "study/json_config.hpp"
#include "xgrad/inspect/attribution.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"

namespace xgrad::cli {
namespace {

namespace fs = std::filesystem;

patching::Metric read_metric(const fs::path& in, const nn::GPTConfig& c, const patching::Ids& clean) {
    const fs::path path = in / "metric.json";
    const std::string source = path.string();
    const nlohmann::json j = parse_config_object(read_config_text(path), source);
    const ConfigReader r(j, source);
    const auto& kind = r.get("kind");
    patching::Metric m;
    if (kind == "loss") {
        for (const auto& [key, value] : j.items())
            if (key != "kind") throw io_error(source + ": unknown field \"" + key + "\" for kind \"loss\"");
        m.kind = patching::Metric::Kind::loss;
        m.targets = read_gpt_ids(in, "targets", c, true);
        if (m.targets.shape() != clean.shape())
            throw io_error((in / "targets.npy").string() + ": has shape " + shape_str(m.targets.shape()) +
                           ", clean.npy has " + shape_str(clean.shape()));
        return m;
    }
    if (kind != "logit_diff") r.fail("kind", "must be \"logit_diff\" or \"loss\", got " + ConfigReader::shown(kind));
    for (const auto& [key, value] : j.items())
        if (key != "kind" && key != "correct" && key != "wrong")
            throw io_error(source + ": unknown field \"" + key + "\"");
    const auto tokens = [&](const char* field) {
        const auto& v = r.get(field);
        if (!v.is_array() || v.size() != clean.shape()[0])
            r.fail(field, "must be a list of " + std::to_string(clean.shape()[0]) + " token ids (one per row of clean.npy), got " +
                              ConfigReader::shown(v));
        std::vector<std::int64_t> ids;
        for (const auto& e : v) {
            if (!e.is_number_integer() || e.get<long long>() < 0 || e.get<long long>() >= (long long)c.vocab_size)
                r.fail(field, "must hold ids in [0, " + std::to_string(c.vocab_size) + "), got " + ConfigReader::shown(e));
            ids.push_back(e.get<std::int64_t>());
        }
        return ids;
    };
    m.correct = tokens("correct"), m.wrong = tokens("wrong");
    return m;
}

template <Real T>
std::map<std::string, io::NpyArray> study(const nn::GPT<T>& model, const patching::Ids& clean,
                                          const patching::Ids& corrupt, const patching::Metric& m, std::size_t ig_steps) {
    std::map<std::string, io::NpyArray> files;
    const auto put = [&](const std::string& name, const auto& array) {
        files[name] = io::NpyArray::from(xt::eval(xt::cast<double>(array)));
    };
    const auto scalar = [](double v) {
        xt::xtensor<double, 0> a;
        a() = v;
        return a;
    };
    const auto exact = patching::activation_patching(model, clean, corrupt, m);
    put("clean_metric", scalar(exact.from)), put("corrupt_metric", scalar(exact.into));
    put("patch.head", exact.head), put("patch.head_pos", exact.head_pos), put("patch.resid_pre", exact.resid_pre);
    put("patch.attn_out", exact.attn_out), put("patch.mlp_out", exact.mlp_out);
    const auto atp = patching::attribution_patching(model, clean, corrupt, m);
    put("atp.head", atp.head), put("atp.head_pos", atp.head_pos), put("atp.resid_pre", atp.resid_pre);
    if (m.kind == patching::Metric::Kind::logit_diff) {
        const auto dla = patching::direct_logit_attribution(model, clean, m);
        put("dla.head", dla.head), put("dla.mlp", dla.mlp);
    }
    put("logit_lens", patching::logit_lens(model, clean, m));
    const auto ig = patching::integrated_gradients(model, clean, std::optional(corrupt), m, ig_steps);
    put("ig.embed", ig.attribution), put("ig.completeness", scalar(ig.completeness));
    return files;
}

void run_patch(const fs::path& in, const fs::path& out, std::size_t ig_steps) {
    io::StagingDir::check_target(out);
    const auto [config, model] = read_gpt_model(in);
    const auto clean = read_gpt_ids(in, "clean", config, false), corrupt = read_gpt_ids(in, "corrupt", config, false);
    if (clean.shape() != corrupt.shape())
        throw io_error((in / "corrupt.npy").string() + ": has shape " + shape_str(corrupt.shape()) + ", clean.npy has " +
                       shape_str(clean.shape()));
    const patching::Metric m = read_metric(in, config, clean);
    const auto files = std::visit([&](const auto& gpt) { return study(gpt, clean, corrupt, m, ig_steps); }, model);
    io::StagingDir stage(out);
    for (const auto& [name, a] : files) io::write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace

void setup_patch(CLI::App& cmd) {
    static std::string from, to;
    static std::size_t ig_steps = 32;
    cmd.add_option("--from", from, "input directory: config.json and the parameters under nanoGPT's names (as `xgrad gpt`), "
                                   "clean.npy, corrupt.npy, metric.json (and targets.npy for the loss)")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    cmd.add_option("--ig-steps", ig_steps, "integrated gradients' steps (the midpoint rule)")->check(CLI::Range(1, 4096));
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            run_patch(from, to, ig_steps);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
