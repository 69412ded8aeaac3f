// `xgrad patch --from IN --to OUT`: activation patching, attribution patching, direct logit
// attribution, the logit lens and integrated gradients (inspect/patching.hpp, inspect/attribution.hpp)
// of a GPT given as nanoGPT's files (study/gpt_files.hpp) on a clean and a corrupted input:
//   IN/config.json, IN/<name>.npy      the model, as `xgrad gpt` reads it
//   IN/clean.npy, IN/corrupt.npy       int64 (B, T), the same shape
//   IN/metric.json                     {"kind": "logit_diff", "correct": [B ids], "wrong": [B ids]}
//                                      (at position T - 1) or {"kind": "loss"} with IN/targets.npy
// Or `--checkpoint FILE` / `--model DIR` (a `train gpt` checkpoint, an llm.c .bin, a model folder)
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
#include "study/plot.hpp"
#include "tasks/gpt.hpp"
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

// Pearson's correlation of a and b, and Spearman's (Pearson's of their ranks, ties averaged).
double pearson(const std::vector<double>& a, const std::vector<double>& b) {
    const double n = double(a.size());
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
    for (std::size_t i = 0; i < a.size(); ++i)
        sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
    return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}
std::vector<double> ranks(const std::vector<double>& x) {
    std::vector<std::size_t> order(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
        for (std::size_t k = i; k <= j; ++k) r[order[k]] = (double(i) + double(j)) / 2;
        i = j + 1;
    }
    return r;
}

// patch.png: per layer and head, exact patching's effect (patched − corrupted metric) beside AtP's
// estimate, one colour scale, their correlations in the title.
std::vector<unsigned char> patch_picture(const patching::Result& exact, const patching::Result& atp) {
    const std::size_t L = exact.head.shape()[0], H = exact.head.shape()[1];
    xt::xtensor<double, 3> maps = xt::zeros<double>({std::size_t(2), L, H});
    std::vector<double> a, b;
    double largest = 1e-12;
    for (std::size_t l = 0; l < L; ++l)
        for (std::size_t h = 0; h < H; ++h) {
            maps(0, l, h) = exact.head(l, h) - exact.into, maps(1, l, h) = atp.head(l, h);
            a.push_back(maps(0, l, h)), b.push_back(maps(1, l, h));
            largest = std::max({largest, std::abs(maps(0, l, h)), std::abs(maps(1, l, h))});
        }
    AttentionMaps m;
    m.title = fmt::format("patching each head's z, clean into corrupted: Pearson {:.3f}, Spearman {:.3f}", pearson(a, b),
                          pearson(ranks(a), ranks(b)));
    m.panel_titles = {"exact: patched - corrupted metric", "AtP estimate"};
    for (std::size_t l = 0; l < L; ++l) m.query_labels.push_back(std::to_string(l));
    for (std::size_t h = 0; h < H; ++h) m.key_labels.push_back(std::to_string(h));
    m.low = -largest, m.high = largest, m.scale = "metric change", m.rows = "layer", m.columns = "head";
    return attention_grid_png(maps, m);
}

template <Real T>
std::map<std::string, io::NpyArray> study(const nn::GPT<T>& model, const patching::Ids& clean,
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
    std::string from, to, checkpoint, model, clean_text, corrupt_text, correct, wrong;
    std::size_t ig_steps = 32, loss_from = 0;
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

// A checkpoint or folder with two texts.
void patch_texts(const PatchOptions& o) {
    if (o.clean_text.empty() || o.corrupt_text.empty())
        throw value_error("--checkpoint and --model need --clean-text and --corrupt-text");
    const gpt_task::LoadedModel loaded = gpt_task::load_model(o.model.empty() ? o.checkpoint : o.model);
    if (!loaded.tokenizer)
        throw value_error(o.checkpoint + ": an llm.c model has no tokenizer; give its ids as files with --from");
    const text::Tokenizer& tok = *loaded.tokenizer;
    const auto clean_ids = tok.encode(o.clean_text, "--clean-text"), corrupt_ids = tok.encode(o.corrupt_text, "--corrupt-text");
    if (clean_ids.size() != corrupt_ids.size())
        throw value_error(fmt::format("--corrupt-text: {} tokens, --clean-text {}; the two runs need the same length",
                                      corrupt_ids.size(), clean_ids.size()));
    if (clean_ids.empty() || clean_ids.size() > loaded.model.config.block_size)
        throw value_error(fmt::format("--clean-text: {} tokens; between 1 and block_size {}", clean_ids.size(),
                                      loaded.model.config.block_size));
    const std::size_t Tn = clean_ids.size();
    patching::Ids clean({std::size_t(1), Tn}), corrupt({std::size_t(1), Tn});
    std::copy(clean_ids.begin(), clean_ids.end(), clean.begin());
    std::copy(corrupt_ids.begin(), corrupt_ids.end(), corrupt.begin());
    patching::Metric m;
    if (o.correct.empty() != o.wrong.empty()) throw value_error("give --correct and --wrong together, or neither (the loss)");
    if (!o.correct.empty()) {
        const auto one = [&](const std::string& text, const char* option) {
            const auto ids = tok.encode(text, option);
            if (ids.size() != 1)
                throw value_error(fmt::format("{}: \"{}\" is {} tokens; the logit difference needs one", option, text, ids.size()));
            return ids[0];
        };
        m.correct = {one(o.correct, "--correct")}, m.wrong = {one(o.wrong, "--wrong")};
    } else {  // the loss of the clean text's next tokens, from position --loss-from on
        if (o.loss_from + 1 >= Tn)
            throw value_error(fmt::format("--loss-from: {} leaves no next token of the {} of --clean-text", o.loss_from, Tn));
        m.kind = patching::Metric::Kind::loss;
        m.targets = patching::Ids({std::size_t(1), Tn});
        for (std::size_t t = 0; t < Tn; ++t) m.targets(0, t) = t >= o.loss_from && t + 1 < Tn ? clean_ids[t + 1] : -1;
    }
    std::vector<unsigned char> picture;
    const auto files = study(loaded.model, clean, corrupt, m, o.ig_steps, picture);
    write_outputs(o.to, files, picture);
}

}  // namespace

void setup_patch(CLI::App& cmd) {
    static PatchOptions o;
    auto* from = cmd.add_option("--from", o.from, "input directory: config.json and the parameters under nanoGPT's names "
                                                  "(as `xgrad gpt`), clean.npy, corrupt.npy, metric.json (and targets.npy "
                                                  "for the loss) (default: none: --checkpoint or --model)");
    auto* checkpoint = cmd.add_option("--checkpoint", o.checkpoint, "a `train gpt` checkpoint instead of --from (with "
                                                                    "--clean-text and --corrupt-text) (default: none)");
    auto* model = cmd.add_option("--model", o.model, "a model folder (Hugging Face's GPT-2 layout, or `train gpt --out`'s) "
                                                     "instead of --from (default: none)")
                      ->check(CLI::ExistingDirectory);
    from->excludes(checkpoint)->excludes(model);
    checkpoint->excludes(model);
    cmd.add_option("--to", o.to, "output directory (created; files are replaced)")->required();
    cmd.add_option("--clean-text", o.clean_text, "the clean input, tokenized by the model's tokenizer (default: none)");
    cmd.add_option("--corrupt-text", o.corrupt_text, "the corrupted input, as many tokens as the clean (default: none)");
    cmd.add_option("--correct", o.correct, "the logit difference's correct token, as text (default: the clean text's "
                                           "loss is the metric)");
    cmd.add_option("--wrong", o.wrong, "its wrong token, as text (default: none)");
    cmd.add_option("--loss-from", o.loss_from, "the loss metric counts the clean text's next tokens from this position on");
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
