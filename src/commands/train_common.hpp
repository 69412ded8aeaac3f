// What the `xgrad train` commands of attention models (copy, sort) share: their run options
// (seed, threads, evaluation and logging, --out, --resume, --deterministic), the data-parallel
// step and the loop of steps with its progress display, loss.csv and loss curve, resuming from a
// checkpoint of the same model, and atomic text files. A command's options struct has the fields
// named here (seed, threads, eval_every, log_every, quiet, verbose, out, resume, steps).
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "commands/distributed.hpp"
#include "study/plot.hpp"
#include "commands/progress.hpp"
#include "xgrad/io/checkpoint.hpp"

namespace xgrad::cli {

inline void write_text(const std::filesystem::path& path, const std::string& text) {
    io::write_file_atomic(path, text.data(), text.size());
}

// --log-every, --quiet, --verbose: how train_progress (below) shows the run.
template <class Options>
void add_progress_options(CLI::App& cmd, Options& o) {
    cmd.add_option("--log-every", o.log_every, "when stdout is not a terminal: a progress line every N steps")
        ->check(at_least(1));
    auto* quiet = cmd.add_flag("--quiet,-q", o.quiet, "print nothing but errors");
    cmd.add_flag("--verbose,-v", o.verbose, "a progress line at every evaluation instead of the bar")->excludes(quiet);
}

// --seed, --threads, --eval-every, --log-every, --quiet, --verbose, --out, --resume.
template <class Options>
void add_train_run_options(CLI::App& cmd, Options& o) {
    cmd.add_option("--seed", o.seed, "random seed (same seed, same losses)");
    cmd.add_option("--threads", o.threads, "threads (xgrad's GEMMs and attention loops)")->check(between(1, 64));
    cmd.add_option("--eval-every", o.eval_every, "held-out evaluation every N steps")->check(at_least(1));
    add_progress_options(cmd, o);
    cmd.add_option("--out", o.out, "folder for metrics.json, loss.csv, loss.png, attention.png and checkpoint.npz "
                                   "(default: none, nothing is written)");
    cmd.add_option("--resume", o.resume,
                   "continue from a checkpoint.npz of a run with the same options, up to --steps in all "
                   "(default: none, from step 1)")
        ->check(existing_file_on_rank0());
}

// The progress display of a run of steps first..o.steps: a bar on a terminal, lines otherwise,
// nothing when `quiet` (--quiet, or not rank 0). Under mpirun always lines: mpirun hands rank 0 a
// pseudo-terminal even when the job's output goes to a file, which would fill it with \r and ESC[K.
template <class Options>
TrainProgress train_progress(const Options& o, int first_step, bool quiet, std::string score_name = "acc",
                             double tokens_per_step = 0) {
    const bool terminal = ::isatty(STDOUT_FILENO) && !dist::launched_by_mpirun();
    const ProgressMode mode = quiet                     ? ProgressMode::quiet
                              : terminal && !o.verbose ? ProgressMode::bar
                                                        : ProgressMode::lines;
    return TrainProgress(mode, first_step, o.steps, o.verbose ? o.eval_every : o.log_every, std::move(score_name),
                         tokens_per_step);
}

// --deterministic, and the command registered as data-parallel: under mpirun --batch is the global
// batch (even_shard), only rank 0 prints and writes (src/commands/distributed.hpp).
template <class Options>
void add_data_parallel_options(CLI::App& cmd, Options& o) {
    cmd.add_flag("--deterministic", o.deterministic,
                 "under mpirun: sum gradients in rank order (bitwise the same on every rank and every run)");
    data_parallel_commands().insert(&cmd);
}

// One data-parallel optimizer step from this rank's mean loss over its equal share of the batch:
// backward, the gradients averaged over the ranks, the step. Returns the global mean loss (what one
// process computes on the whole batch).
template <class T, class Optimizer>
double data_parallel_step(const dist::Context& ctx, dist::DataParallel<T>& data_parallel, Optimizer& optimizer,
                          const Var<T, 0>& loss) {
    backward(loss, {.keep_intermediate_grads = false});
    data_parallel.synchronize();
    optimizer.step();
    optimizer.zero_grad();
    const double local = loss.value()();
    tape().clear();
    return global_mean(ctx, local);
}

// What a train step reports: the global mean loss and the learning rate it used.
struct StepResult {
    double loss, lr;
};

// A run of steps: loss.csv's text, the points of loss.png, the last loss and held-out scores.
struct TrainRecord {
    std::string csv;
    LossCurve curve;
    double loss = 0;
    std::vector<double> scores;  // the last evaluation, one per score name
    double seconds = 0;
};

// Steps first_step..o.steps: `step(s)` trains step s (StepResult); every o.eval_every steps and at
// the last, `evaluate()` returns the held-out scores named `score_names` (the first is the one
// plotted and shown in the progress). loss.csv's columns: step, loss, the scores (empty between
// evaluations), lr.
template <class Options, class Step, class Evaluate>
TrainRecord run_train_steps(const Options& o, int first_step, bool quiet, const std::vector<std::string>& score_names,
                            Step&& step, Evaluate&& evaluate) {
    TrainProgress progress = train_progress(o, first_step, quiet);
    TrainRecord r;
    r.csv = "step,loss,";
    for (const auto& name : score_names) r.csv += name + ",";
    r.csv += "lr\n";
    r.scores.assign(score_names.size(), 0.0);
    const auto start = std::chrono::steady_clock::now();
    for (int s = first_step; s <= o.steps; ++s) {
        const StepResult done = step(s);
        r.loss = done.loss;
        const bool eval_now = s % o.eval_every == 0 || s == o.steps;
        if (eval_now) {
            r.scores = evaluate();
            r.curve.eval_steps.push_back(s), r.curve.accuracy.push_back(r.scores.at(0));
        }
        r.curve.steps.push_back(s), r.curve.loss.push_back(done.loss);
        r.csv += fmt::format("{},{},", s, done.loss);
        for (const double score : r.scores) r.csv += eval_now ? fmt::format("{},", score) : ",";
        r.csv += fmt::format("{}\n", done.lr);
        progress.update(s, done.loss, eval_now ? std::optional(r.scores.at(0)) : std::nullopt);
    }
    progress.finish();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
}

// Loads o.resume into the model, the optimizer and the generators (every rank's, from rank 0's
// file) and returns the first step to run. The checkpoint must record the same model (`wanted`: a
// different --heads would otherwise load without complaint) and fewer steps than o.steps;
// value_error naming the file otherwise.
template <class Options, class Model, class Optimizer>
int resume_checkpoint(const dist::Context& ctx, const Options& o, const char* command,
                      const std::map<std::string, std::int64_t>& wanted, Model& model, Optimizer& optimizer,
                      const io::NamedGenerators& generators) {
    const auto saved = dist::read_checkpoint_config(ctx, o.resume);
    std::string made_with, this_run;
    for (const auto& [key, value] : wanted)
        if (saved.count(key) && saved.at(key) != value) {
            made_with += fmt::format(" {}={}", key, saved.at(key));
            this_run += fmt::format(" {}={}", key, value);
        }
    if (!made_with.empty())
        throw value_error(o.resume + ": the checkpoint was made with" + made_with + ", this run has" + this_run);
    const auto done = dist::load_checkpoint(ctx, o.resume, model, optimizer, generators);
    if (done >= o.steps)
        throw value_error(fmt::format("{}: --steps ({}) must exceed the {} steps already taken in {}", command, o.steps,
                                      done, o.resume));
    return int(done) + 1;
}

// The folder of a finished run, written by rank 0: metrics.json (with "world_size" added),
// loss.csv, loss.png (drawn from `curve`), attention.png and the checkpoint (the model, the
// optimizer, `steps`, every rank's generators and the model `config`; the other ranks only send
// their generators; `checkpoint` names it, .npz or .safetensors). Everything is encoded before the folder is made and every file is written
// atomically: a failure leaves no half-filled output.
template <class Model, class Optimizer>
void write_train_outputs(const dist::Context& ctx, const std::string& dir, const nlohmann::json& metrics,
                         const std::string& csv, const LossCurve& curve,
                         const std::vector<unsigned char>& attention_png, const Model& model,
                         const Optimizer& optimizer, int steps, const io::NamedGenerators& generators,
                         const std::map<std::string, std::int64_t>& config,
                         const std::string& checkpoint = "checkpoint.npz") {
    const std::filesystem::path out(dir);
    if (!ctx.is_root()) return dist::save_checkpoint(ctx, out / checkpoint, model, optimizer, steps, generators, config);
    const auto loss_png = loss_chart_png(curve);
    std::filesystem::create_directories(out);
    nlohmann::json all_metrics = metrics;
    all_metrics["world_size"] = ctx.world_size();
    write_text(out / "metrics.json", all_metrics.dump(2) + "\n");
    write_text(out / "loss.csv", csv);
    write_png(out / "loss.png", loss_png);
    write_png(out / "attention.png", attention_png);
    dist::save_checkpoint(ctx, out / checkpoint, model, optimizer, steps, generators, config);
}

}  // namespace xgrad::cli
