// `xgrad train copy`: embedding + positions + causal MultiheadAttention + linear head learn the
// copy task with Adam; held-out token accuracy on the copied half is reported and saved. Under
// mpirun it trains data-parallel (src/commands/distributed.hpp): --batch is the global batch, each rank
// takes an equal share of every step's batch, and only rank 0 prints and writes.
#include <cblas.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include "commands/commands.hpp"
#include "commands/distributed.hpp"
#include "study/plot.hpp"
#include "commands/train_common.hpp"
#include "tasks/copy.hpp"

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
    const copy_task::Batch my_held_out = held_out.rows(eval_shard.begin, eval_shard.end);

    const bool quiet = o.quiet || !root;
    const auto say = [&](const std::string& line) {
        if (!quiet) fmt::print("{}\n", line);
    };
    say(fmt::format("copy task: {} tokens from a vocabulary of {}, embed {}, {} heads, batch {}, Adam lr {}{}{}",
                    o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr,
                    ranks_note(ctx, shard, "sequences"),
                    o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1)));
    // Every file is written at the end, atomically: a run that fails leaves nothing behind.
    TrainRecord run = run_train_steps(
        o, first_step, quiet, {"accuracy"},
        [&](int) {
            // Every rank draws the whole global batch (the data of one process) and trains on its rows.
            const auto batch =
                copy_task::make_batch(o.batch, o.model.seq, o.model.vocab, data_gen).rows(shard.begin, shard.end);
            const auto loss = cross_entropy(model(batch.tokens), batch.targets);
            return StepResult{data_parallel_step(ctx, data_parallel, adam, loss), o.lr};
        },
        [&] {
            const std::size_t rows = my_held_out.targets.size();
            const double acc = rows == 0 ? 0 : copy_task::accuracy(model, my_held_out);
            return std::vector{global_fraction(ctx, acc, rows, held_out.targets.size())};
        });
    const double loss_value = run.loss, acc = run.scores[0], seconds = run.seconds;
    say(fmt::format("finished {} steps in {:.1f} s: loss {:.4f}, held-out token accuracy {:.4f}",
                    o.steps - first_step + 1, seconds, loss_value, acc));
    if (o.out.empty()) return 0;
    const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss_value}, {"accuracy", acc},
                                    {"seconds", seconds}, {"seed", o.seed}};
    run.curve.title = fmt::format("copy task: {} tokens, vocabulary {}, embed {}, {} heads, batch {}, Adam lr {}",
                              o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr);
    write_train_outputs(ctx, o.out, metrics, run.csv, run.curve, root ? attention_picture(model, held_out, o.steps)
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
    add_data_parallel_options(copy, o);
    copy.callback([] { selected_action() = [] { return train_copy(o); }; });
}

}  // namespace xgrad::cli
