// `xgrad heads CHECKPOINT`: what each attention head of a trained copy-task model does. The
// measurements are study/heads.hpp's (scores, labels, importance by ablation); this prints them and
// draws the mean attention maps. A `train gpt` checkpoint: every layer's heads on its text, with
// induction scores (study/gpt_heads.cpp); a `train llama` checkpoint the same; `--model DIR`, a GPT-2
// folder in Hugging Face's layout, the same.
#include <filesystem>
#include <string>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "study/plot.hpp"
#include "study/heads.hpp"
#include "tasks/copy.hpp"
#include "tasks/gpt.hpp"
#include "xgrad/io/checkpoint.hpp"

namespace xgrad::cli {
namespace {

struct HeadsOptions {
    std::string checkpoint, model, out, text;
    int sequences = 256;
    std::uint64_t seed = 12345;
};

int heads(const HeadsOptions& o) {
    namespace fs = std::filesystem;
    if (o.checkpoint.empty() == o.model.empty()) throw value_error("give a CHECKPOINT or --model DIR (one of them)");
    if (!o.model.empty()) return gpt_heads(o.model, o.out, o.sequences, o.seed, o.text);
    const auto config = io::read_checkpoint_config(o.checkpoint);
    if (config.count("n_layer") || config.count("n_layers")) return gpt_heads(o.checkpoint, o.out, o.sequences, o.seed, o.text);
    const auto options = copy_task::ModelOptions::from_config(config, o.checkpoint);
    Generator unused_init(0);
    copy_task::Model<float> model(options, unused_init);
    io::load_state_dict(model, o.checkpoint);
    const CopyHeadStudy study = study_copy_heads(model, std::size_t(o.sequences), o.seed);

    fmt::print("{}: copy task of {} tokens, vocabulary {}, embed {}, {} heads, {}; {} held-out sequences\n",
               o.checkpoint, options.seq, options.vocab, options.embed, options.heads,
               options.causal ? "causal" : "not causal", o.sequences);
    fmt::print("held-out loss {:.4f}, token accuracy {:.4f}\n\n", study.loss, study.accuracy);
    fmt::print("{:>4}  {:<27} {:>6} {:>12} {:>11} {:>11} {:>15} {:>14}\n", "head", "label", "offset", "offset mass",
               "first-token", "uniformity", "ablation: loss", "accuracy");
    for (const HeadReport& r : study.heads) {
        const auto& s = r.scores;
        fmt::print("{:>4}  {:<27} {:>6} {:>12.3f} {:>11.3f} {:>11.3f} {:>+15.4f} {:>+14.4f}\n", r.head, r.label, s.offset,
                   s.offset_mass, s.first_token_mass, s.uniformity, *r.ablation_loss, *r.ablation_accuracy);
    }
    if (o.out.empty()) return 0;

    AttentionMaps maps;
    for (const HeadReport& r : study.heads) maps.panel_titles.push_back(fmt::format("head {}: {}", r.head, r.label));
    for (std::size_t t = 0; t < 2 * options.seq; ++t)
        maps.key_labels.push_back(t < options.seq ? fmt::format("a{}", t + 1)
                                  : t == options.seq ? "|"
                                                     : fmt::format("a{}", t - options.seq));
    maps.query_labels = maps.key_labels;
    maps.title = fmt::format("mean attention over {} held-out sequences ({})", o.sequences, o.checkpoint);
    const auto png = attention_grid_png(study.mean_weights, maps);
    fs::create_directories(o.out);
    write_png(fs::path(o.out) / "heads.png", png);
    fmt::print("\nwrote {}/heads.png\n", o.out);
    return 0;
}

}  // namespace

void setup_heads(CLI::App& cmd) {
    static HeadsOptions o;
    auto* checkpoint = cmd.add_option("checkpoint", o.checkpoint,
                                      "a checkpoint (.npz or .safetensors) of `xgrad train copy`, `train gpt` or `train llama`")
                           ->check(CLI::ExistingFile);
    cmd.add_option("--model", o.model, "a GPT-2 or Llama folder in Hugging Face's layout (config.json, model.safetensors, "
                                       "the tokenizer's files), instead of a checkpoint (default: none)")
        ->check(CLI::ExistingDirectory)
        ->excludes(checkpoint);
    cmd.add_option("--out", o.out, "folder for heads.png, the mean attention map of every head (default: none)");
    cmd.add_option("--sequences", o.sequences, "held-out sequences to run")->check(between(1, 100000));
    cmd.add_option("--seed", o.seed, "seed of the held-out sequences");
    cmd.add_option("--text", o.text, "a GPT's text (default: the fortunes package, as train gpt)")->check(CLI::ExistingFile);
    cmd.callback([] { selected_action() = [] { return heads(o); }; });
}

}  // namespace xgrad::cli
