// `xgrad train copy`: embedding + positions + causal MultiheadAttention + linear head learn the
// copy task with Adam; held-out token accuracy on the copied half is reported and saved. Under
// mpirun it trains data-parallel (src/distributed.hpp): --batch is the global batch, each rank
// takes an equal share of every step's batch, and only rank 0 prints and writes.
#include <cblas.h>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include "commands.hpp"
#include "copy_task.hpp"
#include "distributed.hpp"
#include "plot.hpp"
#include "progress.hpp"

namespace xgrad::cli {
namespace {

struct CopyOptions {
    copy_task::ModelOptions model;
    int steps = 1000;
    int batch = 32;
    double lr = 3e-3;
    std::uint64_t seed = 1;
    int threads = 1;
    int eval_every = 50;
    int eval_sequences = 256;
    int log_every = 100;
    bool quiet = false, verbose = false;
    bool deterministic = false;
    std::string out;
    std::string resume;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
    io::write_file_atomic(path, text.data(), text.size());
}

// The attention of every head on held-out sequence 0 (the copy task's tokens as labels, | the separator).
std::vector<unsigned char> attention_picture(const copy_task::Model<float>& model, const copy_task::Batch& held_out,
                                             int step) {
    NoGrad no_record;
    const xt::xtensor<std::int64_t, 2> tokens = xt::view(held_out.tokens, xt::range(0, 1), xt::all());
    Var<float, 4> weights;
    model(tokens, &weights);
    const auto& o = model.options;
    AttentionMaps maps;
    for (std::size_t t = 0; t < tokens.shape(1); ++t)
        maps.key_labels.push_back(tokens(0, t) == std::int64_t(o.vocab) ? "|" : std::to_string(tokens(0, t)));
    maps.query_labels = maps.key_labels;
    for (std::size_t h = 0; h < o.heads; ++h) maps.panel_titles.push_back(fmt::format("head {}", h));
    maps.title = fmt::format("attention weights on a held-out sequence after {} steps ({}, copy of {} tokens)", step,
                             o.causal ? "causal" : "not causal", o.seq);
    return attention_grid_png(xt::xtensor<double, 3>(xt::view(weights.value(), 0)), maps);
}

int train_copy(const CopyOptions& o) {
    namespace fs = std::filesystem;
    set_num_threads(std::size_t(o.threads));
    const dist::Context& ctx = process_group();
    const Shard shard = even_shard(ctx, std::size_t(o.batch), "--batch");
    const bool root = ctx.is_root();
    Generator init_gen(o.seed), data_gen(o.seed + 1), held_out_gen(o.seed + 2);
    copy_task::Model<float> model(o.model, init_gen);
    optim::Adam adam(model, {.lr = o.lr});
    // What a checkpoint restores besides the weights and Adam: the model's own generators (its
    // dropouts'), the data stream where it stopped and the (never drawn from) source of the held-out set.
    io::NamedGenerators generators = named_generators(model, "model.");
    generators.insert(generators.end(), {{"data", &data_gen}, {"held_out", &held_out_gen}});
    int first_step = 1;
    if (!o.resume.empty()) {
        // The same model first: a different --heads or --seq would otherwise load without complaint.
        const auto saved = dist::read_checkpoint_config(ctx, o.resume), wanted = o.model.config();
        std::string made_with, this_run;
        for (const auto& [key, value] : wanted)
            if (saved.count(key) && saved.at(key) != value) {
                made_with += fmt::format(" {}={}", key, saved.at(key));
                this_run += fmt::format(" {}={}", key, value);
            }
        if (!made_with.empty())
            throw value_error(o.resume + ": the checkpoint was made with" + made_with + ", this run has" + this_run);
        const auto done = dist::load_checkpoint(ctx, o.resume, model, adam, generators);
        if (done >= o.steps)
            throw value_error("train copy: --steps (" + std::to_string(o.steps) + ") must exceed the " +
                              std::to_string(done) + " steps already taken in " + o.resume);
        first_step = int(done) + 1;
    }
    // Every rank holds rank 0's parameters (the same already: the same seed) and averages gradients.
    dist::DataParallel<float> data_parallel(ctx, model, {.deterministic = o.deterministic});
    Generator held_out_draws = held_out_gen;
    const auto held_out = copy_task::make_batch(o.eval_sequences, o.model.seq, o.model.vocab, held_out_draws);
    // Each rank evaluates its share of the held-out sequences; the counts are summed.
    const Shard eval_shard = uneven_shard(ctx, std::size_t(o.eval_sequences));
    const copy_task::Batch my_held_out{take_rows(held_out.tokens, eval_shard),
                                       take_rows(held_out.targets, {eval_shard.begin * o.model.seq,
                                                                    eval_shard.end * o.model.seq})};
    const auto held_out_accuracy = [&] {
        const double rows = double(my_held_out.targets.size());
        const double right = rows == 0 ? 0 : std::round(copy_task::accuracy(model, my_held_out) * rows);
        return global_sum(ctx, right) / double(held_out.targets.size());
    };

    const bool quiet = o.quiet || !root;
    const auto say = [&](const std::string& line) {
        if (!quiet) fmt::print("{}\n", line);
    };
    say(fmt::format("copy task: {} tokens from a vocabulary of {}, embed {}, {} heads, batch {}, Adam lr {}{}{}",
                    o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr,
                    ctx.world_size() > 1 ? fmt::format(", {} ranks of {} sequences", ctx.world_size(), shard.size()) : "",
                    o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1)));
    const ProgressMode mode = quiet                                 ? ProgressMode::quiet
                              : ::isatty(STDOUT_FILENO) && !o.verbose ? ProgressMode::bar
                                                                      : ProgressMode::lines;
    TrainProgress progress(mode, first_step, o.steps, o.verbose ? o.eval_every : o.log_every);
    // Every file is written at the end, atomically: a run that fails leaves nothing behind.
    std::string csv = "step,loss,accuracy,lr\n";
    LossCurve curve;
    const auto start = std::chrono::steady_clock::now();
    double loss_value = 0, acc = 0;
    for (int step = first_step; step <= o.steps; ++step) {
        // Every rank draws the whole global batch (the data of one process) and trains on its rows.
        const auto batch = copy_task::make_batch(o.batch, o.model.seq, o.model.vocab, data_gen);
        const auto tokens = take_rows(batch.tokens, shard);
        const auto targets = take_rows(batch.targets, {shard.begin * o.model.seq, shard.end * o.model.seq});
        auto loss = cross_entropy(model(tokens), targets);
        backward(loss);
        data_parallel.synchronize();
        adam.step();
        adam.zero_grad();
        tape().clear();
        loss_value = global_mean(ctx, loss.value()());
        const bool eval_now = step % o.eval_every == 0 || step == o.steps;
        if (eval_now) {
            acc = held_out_accuracy();
            curve.eval_steps.push_back(step), curve.accuracy.push_back(acc);
        }
        curve.steps.push_back(step), curve.loss.push_back(loss_value);
        csv += fmt::format("{},{},{},{}\n", step, loss_value, eval_now ? fmt::format("{}", acc) : "", o.lr);
        progress.update(step, loss_value, eval_now ? std::optional(acc) : std::nullopt);
    }
    progress.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    say(fmt::format("finished {} steps in {:.1f} s: loss {:.4f}, held-out token accuracy {:.4f}",
                    o.steps - first_step + 1, seconds, loss_value, acc));
    if (o.out.empty()) return 0;
    const fs::path out(o.out);
    if (!root) {  // rank 0 writes the folder; the others give it their generators for the checkpoint
        dist::save_checkpoint(ctx, out / "checkpoint.npz", model, adam, o.steps, generators, o.model.config());
        return 0;
    }
    // Everything is encoded before the folder is made: a failure leaves no half-filled output.
    const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss_value}, {"accuracy", acc},
                                    {"seconds", seconds}, {"seed", o.seed}, {"world_size", ctx.world_size()}};
    curve.title = fmt::format("copy task: {} tokens, vocabulary {}, embed {}, {} heads, batch {}, Adam lr {}",
                              o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr);
    const auto loss_png = loss_chart_png(curve);
    const auto attention_png = attention_picture(model, held_out, o.steps);
    fs::create_directories(out);
    write_text(out / "metrics.json", metrics.dump(2) + "\n");
    write_text(out / "loss.csv", csv);
    write_png(out / "loss.png", loss_png);
    write_png(out / "attention.png", attention_png);
    dist::save_checkpoint(ctx, out / "checkpoint.npz", model, adam, o.steps, generators, o.model.config());
    say(fmt::format("wrote {}: metrics.json, loss.csv, loss.png, attention.png, checkpoint.npz", o.out));
    return 0;
}

}  // namespace

void setup_train_copy(CLI::App& copy) {
    static CopyOptions o;
    copy.add_option("--seq", o.model.seq, "tokens to copy")->check(between(1, 256));
    copy.add_option("--vocab", o.model.vocab, "vocabulary size (plus a separator)")->check(between(2, 100000));
    copy.add_option("--embed", o.model.embed, "embedding dimension")->check(at_least(1));
    copy.add_option("--heads", o.model.heads, "attention heads (must divide --embed)")->check(at_least(1));
    copy.add_option("--steps", o.steps, "training steps")->check(at_least(1));
    copy.add_option("--batch", o.batch, "sequences per step (under mpirun: in all, split evenly over the ranks)")->check(at_least(1));
    copy.add_option("--lr", o.lr, "Adam learning rate")->check(positive());
    copy.add_option("--seed", o.seed, "random seed (same seed, same losses)");
    copy.add_option("--threads", o.threads, "threads (xgrad's GEMMs and attention loops)")->check(between(1, 64));
    copy.add_option("--eval-every", o.eval_every, "held-out evaluation every N steps")->check(at_least(1));
    copy.add_option("--log-every", o.log_every, "when stdout is not a terminal: a progress line every N steps")
        ->check(at_least(1));
    auto* quiet = copy.add_flag("--quiet,-q", o.quiet, "print nothing but errors");
    copy.add_flag("--verbose,-v", o.verbose, "a progress line at every evaluation instead of the bar")->excludes(quiet);
    copy.add_flag("--causal,!--no-causal", o.model.causal, "causal attention mask (default on)");
    copy.add_option("--out", o.out, "folder for metrics.json, loss.csv, loss.png, attention.png and checkpoint.npz "
                                "(default: none, nothing is written)");
    copy.add_option("--resume", o.resume,
                    "continue from a checkpoint.npz of a run with the same options, up to --steps in all "
                    "(default: none, from step 1)")
        ->check(existing_file_on_rank0());
    copy.add_flag("--deterministic", o.deterministic,
                  "under mpirun: sum gradients in rank order (bitwise the same on every rank and every run)");
    copy.callback([] { selected_action() = [] { return train_copy(o); }; });
    data_parallel_commands().insert(&copy);
}

}  // namespace xgrad::cli
