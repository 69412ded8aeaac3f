// `xgrad patch --from IN --to OUT`: activation patching, attribution patching, direct logit
// attribution, the logit lens and integrated gradients (inspect/patching.hpp, inspect/attribution.hpp)
// of a GPT given as nanoGPT's files (study/gpt_files.hpp) on a clean and a corrupted input:
//   IN/config.json, IN/<name>.npy      the model, as `xgrad gpt` reads it
//   IN/clean.npy, IN/corrupt.npy       int64 (B, T), the same shape
//   IN/metric.json                     {"kind": "logit_diff", "correct": [B ids], "wrong": [B ids]}
//                                      (at position T - 1) or {"kind": "loss"} with IN/targets.npy
// Or `--checkpoint FILE` / `--model DIR` (a `train gpt` or `train llama` checkpoint, a model folder)
// with `--clean-text` and `--corrupt-text`, tokenized by the model's tokenizer: the metric is the
// logit difference of `--correct` and `--wrong` (one token each), or else the loss of the clean
// text's next tokens (from position `--loss-from` on). OUT: float64 .npy files (docs/cli.md lists them) and patch.png, exact patching
// beside AtP per head. Bad input: one line naming the file or field, exit status 2, nothing written.
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "study/gpt_files.hpp"
#include "study/json_config.hpp"
#include "study/patch_study.hpp"
#include "study/plot.hpp"
#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"
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
                              (v.is_array() ? "a list of " + std::to_string(v.size()) : ConfigReader::shown(v)));
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

// patch.png: per layer and head, exact patching's effect (patched − corrupted metric) beside AtP's
// estimate, one colour scale, their correlations in the title.
std::vector<unsigned char> patch_picture(const patching::Result& exact, const patching::Result& atp) {
    const HeadEffects e = head_effects(exact, atp);
    xt::xtensor<double, 3> maps = xt::zeros<double>({std::size_t(2), e.layers, e.heads});
    double largest = 1e-12;
    for (std::size_t k = 0; k < e.exact.size(); ++k) {
        maps(0, k / e.heads, k % e.heads) = e.exact[k], maps(1, k / e.heads, k % e.heads) = e.atp[k];
        largest = std::max({largest, std::abs(e.exact[k]), std::abs(e.atp[k])});
    }
    AttentionMaps m;
    m.title = fmt::format("patching each head's z, clean into corrupted: Pearson {:.3f}, Spearman {:.3f}", e.pearson,
                          e.spearman);
    m.panel_titles = {"exact: patched - corrupted metric", "AtP estimate"};
    for (std::size_t l = 0; l < e.layers; ++l) m.query_labels.push_back(std::to_string(l));
    for (std::size_t h = 0; h < e.heads; ++h) m.key_labels.push_back(std::to_string(h));
    m.low = -largest, m.high = largest, m.scale = "metric change", m.rows = "layer", m.columns = "head";
    return attention_grid_png(maps, m);
}

// Every study on a GPT or a Llama; direct logit attribution for the logit difference only.
template <patching::AttributableDecoder M>
std::map<std::string, io::NpyArray> study(const M& model, const patching::Ids& clean,
                                          const patching::Ids& corrupt, const patching::Metric& m, std::size_t ig_steps,
                                          std::vector<unsigned char>& picture) {
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
    picture = patch_picture(exact, atp);
    if (m.kind == patching::Metric::Kind::logit_diff) {
        const auto dla = patching::direct_logit_attribution(model, clean, m);
        put("dla.head", dla.head), put("dla.mlp", dla.mlp);
    }
    put("logit_lens", patching::logit_lens(model, clean, m));
    const auto ig = patching::integrated_gradients(model, clean, std::optional(corrupt), m, ig_steps);
    put("ig.embed", ig.attribution), put("ig.completeness", scalar(ig.completeness));
    return files;
}

struct PatchOptions {
    std::string from, to, checkpoint, model;
    PatchTexts texts;
    std::size_t ig_steps = 32;
};

void write_outputs(const fs::path& out, const std::map<std::string, io::NpyArray>& files,
                   const std::vector<unsigned char>& picture) {
    io::StagingDir stage(out);
    for (const auto& [name, a] : files) io::write_npy(stage.file(name + ".npy"), a);
    write_png(stage.file("patch.png"), picture);
    stage.commit();
}

// IN's files (the contract above).
void patch_files(const PatchOptions& o) {
    const fs::path in = o.from;
    const auto [config, model] = read_gpt_model(in);
    const auto clean = read_gpt_ids(in, "clean", config, false), corrupt = read_gpt_ids(in, "corrupt", config, false);
    if (clean.shape() != corrupt.shape())
        throw io_error((in / "corrupt.npy").string() + ": has shape " + shape_str(corrupt.shape()) + ", clean.npy has " +
                       shape_str(clean.shape()));
    const patching::Metric m = read_metric(in, config, clean);
    std::vector<unsigned char> picture;
    const auto files = std::visit([&](const auto& gpt) { return study(gpt, clean, corrupt, m, o.ig_steps, picture); }, model);
    write_outputs(o.to, files, picture);
}

// A loaded model (a GPT's or a Llama's) with two texts.
template <class Loaded>
void patch_loaded(const Loaded& loaded, const PatchOptions& o) {
    if (!loaded.tokenizer)
        throw value_error(o.checkpoint + ": an llm.c or llama2.c .bin holds no tokenizer for the two texts: export it to a "
                                        "folder with one (xgrad export FILE DIR --tokenizer M) and give --model DIR");
    const PatchRuns runs = patch_runs(*loaded.tokenizer, loaded.model.decoding().positions, o.texts);
    std::vector<unsigned char> picture;
    const auto files = study(loaded.model, runs.clean, runs.corrupt, runs.metric, o.ig_steps, picture);
    write_outputs(o.to, files, picture);
}

// A checkpoint or folder with two texts.
void patch_texts(const PatchOptions& o) {
    if (o.texts.clean.empty() || o.texts.corrupt.empty())
        throw value_error("--checkpoint and --model need --clean-text and --corrupt-text");
    if (const std::string source = o.model.empty() ? o.checkpoint : o.model; llama_task::is_llama(source))
        return patch_loaded(llama_task::load_llama(source), o);
    patch_loaded(gpt_task::load_model(o.model.empty() ? o.checkpoint : o.model), o);
}

}  // namespace

void setup_patch(CLI::App& cmd) {
    static PatchOptions o;
    auto* from = cmd.add_option("--from", o.from, "input directory: config.json and the parameters under nanoGPT's names "
                                                  "(as `xgrad gpt`), clean.npy, corrupt.npy, metric.json (and targets.npy "
                                                  "for the loss) (default: none: --checkpoint or --model)");
    auto* checkpoint = cmd.add_option("--checkpoint", o.checkpoint, "a `train gpt` or `train llama` checkpoint instead of "
                                                                    "--from (with --clean-text and --corrupt-text) (default: none)");
    auto* model = cmd.add_option("--model", o.model, "a model folder (Hugging Face's GPT-2 or Llama layout, or `train gpt --out`'s) "
                                                     "instead of --from (default: none)")
                      ->check(CLI::ExistingDirectory);
    from->excludes(checkpoint)->excludes(model);
    checkpoint->excludes(model);
    cmd.add_option("--to", o.to, "output directory (created; files are replaced)")->required();
    cmd.add_option("--clean-text", o.texts.clean, "the clean input, tokenized by the model's tokenizer (default: none)");
    cmd.add_option("--corrupt-text", o.texts.corrupt, "the corrupted input, as many tokens as the clean (default: none)");
    cmd.add_option("--correct", o.texts.correct, "the logit difference's correct token, as text (default: the clean text's "
                                           "loss is the metric)");
    cmd.add_option("--wrong", o.texts.wrong, "its wrong token, as text (default: none)");
    cmd.add_option("--loss-from", o.texts.loss_from, "the loss metric counts the clean text's next tokens from this position on");
    cmd.add_option("--ig-steps", o.ig_steps, "integrated gradients' steps (the midpoint rule)")->check(CLI::Range(1, 4096));
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            if (o.from.empty() == (o.checkpoint.empty() && o.model.empty()))
                throw value_error("give --from IN, or --checkpoint FILE or --model DIR with --clean-text and --corrupt-text");
            io::StagingDir::check_target(o.to);
            o.from.empty() ? patch_texts(o) : patch_files(o);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
