// `xgrad explore SOURCE --out FILE.html`: one forward and backward of a model on one input, and a
// page of every attention's maps and gradients (study/explore.hpp, docs/explore.md). SOURCE is a
// `train gpt`, `train llama`, `train copy` or `train sort` checkpoint, an llm.c or llama2.c .bin (with
// --tokens), or a folder of `xgrad attention`, `xgrad transformer` or `xgrad gpt`; or `--model DIR`, a
// GPT-2 or Llama folder in Hugging Face's layout. Bad input: one line, exit status 2, no file written.
#include <fmt/core.h>

#include "commands/commands.hpp"
#include "study/explore.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/io/file.hpp"

namespace xgrad::cli {

void setup_explore(CLI::App& cmd) {
    static ExploreOptions o;
    static std::string out;
    static std::string model;
    static int threads = 1;
    auto* source = cmd.add_option("source", o.source, "a checkpoint of `train gpt`, `train llama`, `train copy` or `train "
                                                      "sort` (.npz), an llm.c or llama2.c .bin, or a folder in the format of `xgrad attention`, "
                                                      "`xgrad transformer` or `xgrad gpt`")
                       ->check(CLI::ExistingPath);
    cmd.add_option("--model", model, "a GPT-2 or Llama folder in Hugging Face's layout (config.json, model.safetensors, "
                                     "the tokenizer's files), instead of SOURCE (default: none)")
        ->check(CLI::ExistingDirectory)
        ->excludes(source);
    cmd.add_option("--out", out, "the page to write, one self-contained HTML file")->required();
    cmd.add_option("--text", o.text, "a GPT's or a Llama's input text (default: held-out text of its corpus)");
    cmd.add_option("--corrupt-text", o.patch.corrupt, "a corrupted input as many tokens long as --text: the page adds "
                                                     "exact patching and AtP of each head, clean into corrupted, and "
                                                     "the logit lens of both (a GPT or a Llama; default: none)");
    cmd.add_option("--correct", o.patch.correct, "with --corrupt-text, the logit difference's correct token, as text "
                                                 "(default: the metric is the loss of --text's next tokens)");
    cmd.add_option("--wrong", o.patch.wrong, "its wrong token, as text (default: none)");
    cmd.add_option("--loss-from", o.patch.loss_from, "the loss metric counts --text's next tokens from this position on");
    cmd.add_option("--tokens", o.tokens, "the input as token ids, comma-separated (a GPT or a Llama, as for an llm.c or "
                                         "llama2.c model; the "
                                         "copy task's sequence to copy; the sort task's digits; default: none)")
        ->delimiter(',');
    cmd.add_option("--corpus", o.corpus, "a GPT's or a Llama's text file, for the default input and the head reports "
                                         "(default: the fortunes package, as train gpt)")
        ->check(CLI::ExistingFile);
    cmd.add_option("--length", o.length, "tokens of held-out text as a GPT's or a Llama's default input")->check(between(1, 100000));
    cmd.add_option("--positions", o.positions, "per-position losses offered besides the whole loss (evenly spaced, the "
                                               "last included; 0: none)")
        ->check(between(0, 100000));
    cmd.add_option("--sequence", o.sequence, "which sequence of a folder's batched input to show");
    cmd.add_option("--head-sequences", o.head_sequences, "held-out sequences for the head reports of `xgrad heads` (0: "
                                                         "none)")
        ->check(between(0, 100000));
    cmd.add_option("--seed", o.seed, "seed of the held-out sequences");
    cmd.add_option("--threads", threads, "threads")->check(between(1, 64));
    cmd.callback([] {
        selected_action() = [] {
            if (o.source.empty() == model.empty()) throw value_error("give a SOURCE or --model DIR (one of them)");
            if (!model.empty()) o.source = model, o.gpt_folder = true;
            io::require_parent_dir(out);
            set_num_threads(std::size_t(threads));
            const ExploreData data = explore(o);
            const std::size_t bytes = write_explore_page(data, out);
            const std::string pair = data.patching ? fmt::format(", clean/corrupted: AtP against exact per head, Pearson "
                                                                 "{:.3f}", data.patching->heads.pearson)
                                                   : "";
            fmt::print("{}: {} attention(s), {} loss(es){}; wrote {} ({:.0f} KB)\n", data.title, data.sites.size(),
                       data.choices.size(), pair, out, double(bytes) / 1024);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
