// `xgrad train copy`: embedding + positions + causal MultiheadAttention + linear head learn the
// copy task with Adam; held-out token accuracy on the copied half is reported and saved. Under
// mpirun it trains data-parallel (src/distributed.hpp): --batch is the global batch, each rank
// takes an equal share of every step's batch, and only rank 0 prints and writes.
#include <cblas.h>

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
#include "train_common.hpp"

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
    const int first_step =
        o.resume.empty() ? 1 : resume_checkpoint(ctx, o, "train copy", o.model.config(), model, adam, generators);
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
    TrainProgress progress = train_progress(o, first_step, quiet);
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
    const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss_value}, {"accuracy", acc},
                                    {"seconds", seconds}, {"seed", o.seed}, {"world_size", ctx.world_size()}};
    curve.title = fmt::format("copy task: {} tokens, vocabulary {}, embed {}, {} heads, batch {}, Adam lr {}",
                              o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr);
    write_train_outputs(ctx, o.out, metrics, csv, curve, root ? attention_picture(model, held_out, o.steps)
                                                              : std::vector<unsigned char>{},
                        model, adam, o.steps, generators, o.model.config());
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
    copy.add_flag("--causal,!--no-causal", o.model.causal, "causal attention mask (default on)");
    add_train_run_options(copy, o);
    copy.add_flag("--deterministic", o.deterministic,
                  "under mpirun: sum gradients in rank order (bitwise the same on every rank and every run)");
    copy.callback([] { selected_action() = [] { return train_copy(o); }; });
    data_parallel_commands().insert(&copy);
}

}  // namespace xgrad::cli
