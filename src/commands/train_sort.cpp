// `xgrad train sort`: a small nn::Transformer learns to sort a sequence of digits (teacher forcing
// under a causal mask, Adam with a linear warmup); held-out sequences are decoded greedily and
// scored by exact match and token accuracy. Under mpirun it trains data-parallel as train copy does
// (src/commands/distributed.hpp): --batch is the global batch split evenly, only rank 0 prints and writes.
#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include "commands/commands.hpp"
#include "commands/distributed.hpp"
#include "study/plot.hpp"
#include "commands/train_common.hpp"
#include "tasks/sort.hpp"
#include "xgrad/io/checkpoint.hpp"
#include "xgrad/optim/schedule.hpp"

namespace xgrad::cli {
namespace {

struct SortOptions {
    sort_task::ModelOptions model;
    int steps = 2000;
    int batch = 64;
    double lr = 1e-3;
    int warmup = 100;
    int decay_steps = 2000;
    std::uint64_t seed = 1;
    int threads = 1;
    int eval_every = 500;
    int eval_sequences = 1000;
    int log_every = 100;
    bool quiet = false, verbose = false;
    bool deterministic = false;
    std::string out;
    std::string resume;
};

std::string describe(const SortOptions& o) {
    const auto& m = o.model;
    return fmt::format("sort task: {} digits 0-{}, d_model {}, {} heads, ffn {}, {}+{} layers, batch {}, Adam lr {} "
                       "(warmup {}, cosine to {})",
                       m.seq, m.vocab - 1, m.d_model, m.heads, m.ffn, m.layers, m.layers, o.batch, o.lr, o.warmup,
                       o.decay_steps);
}

// The cross-attention of every decoder layer and head on held-out sequence 0, decoding its greedy
// output: rows are the decoder positions labelled with the digit each produced, columns the input digits.
std::vector<unsigned char> attention_picture(const sort_task::Model<float>& model, const sort_task::Batch& held_out,
                                             int step) {
    NoGrad no_record;
    const xt::xtensor<std::int64_t, 2> src = xt::view(held_out.src, xt::range(0, 1), xt::all());
    const auto decoded = sort_task::greedy_decode(model, src);
    const std::size_t n = src.shape(1), heads = model.options.heads;
    xt::xtensor<std::int64_t, 2> tgt = xt::xtensor<std::int64_t, 2>::from_shape({1, n});
    tgt(0, 0) = std::int64_t(model.options.vocab);  // BOS, then the decoded digits but the last
    for (std::size_t k = 1; k < n; ++k) tgt(0, k) = decoded(0, k - 1);
    const auto layers = model.decode(tgt, model.encode(src), true).cross_attention;  // each (1, H, n, n)
    xt::xtensor<double, 3> weights = xt::xtensor<double, 3>::from_shape({layers.size() * heads, n, n});
    AttentionMaps maps;
    for (std::size_t l = 0; l < layers.size(); ++l)
        for (std::size_t h = 0; h < heads; ++h) {
            xt::view(weights, l * heads + h) = xt::view(layers[l].value(), 0, h);
            maps.panel_titles.push_back(fmt::format("decoder layer {} head {}", l, h));
        }
    for (std::size_t k = 0; k < n; ++k) {
        maps.key_labels.push_back(std::to_string(src(0, k)));
        maps.query_labels.push_back(std::to_string(decoded(0, k)));
    }
    maps.title = fmt::format("cross-attention after {} steps (rows: the digits produced, columns: the input)", step);
    return attention_grid_png(weights, maps);
}

int train_sort(const SortOptions& o) {
    set_num_threads(std::size_t(o.threads));
    const dist::Context& ctx = process_group();
    const Shard shard = even_shard(ctx, std::size_t(o.batch), "--batch");
    const bool root = ctx.is_root();
    Generator init_gen(o.seed), data_gen(o.seed + 1), held_out_gen(o.seed + 2);
    sort_task::Model<float> model(o.model, init_gen);
    optim::Adam adam(model, {.lr = o.lr});
    // Linear warmup to lr, a half cosine down to lr/20 at --decay-steps, then lr/20: the rate depends
    // on the step and these options alone, so a resumed run continues exactly, whatever --steps it is given.
    const optim::WarmupCosine schedule(o.lr, std::size_t(o.warmup), std::size_t(std::max(o.decay_steps, o.warmup)),
                                       o.lr / 20);
    // What a checkpoint restores besides the weights and Adam: the data stream where it stopped and
    // the (never drawn from) source of the held-out set.
    io::NamedGenerators generators = named_generators(model, "model.");
    generators.insert(generators.end(), {{"data", &data_gen}, {"held_out", &held_out_gen}});
    const int first_step =
        o.resume.empty() ? 1 : resume_checkpoint(ctx, o, "train sort", o.model.config(), model, adam, generators);
    // Every rank holds rank 0's parameters (the same already: the same seed) and averages gradients.
    dist::DataParallel<float> data_parallel(ctx, model, {.deterministic = o.deterministic});
    Generator held_out_draws = held_out_gen;
    const auto held_out = sort_task::make_batch(std::size_t(o.eval_sequences), o.model.seq, o.model.vocab, held_out_draws);
    // Each rank decodes its share of the held-out sequences; the counts are summed.
    const Shard eval_shard = uneven_shard(ctx, std::size_t(o.eval_sequences));
    const sort_task::Batch my_held_out = held_out.rows(eval_shard.begin, eval_shard.end);

    const bool quiet = o.quiet || !root;
    const auto say = [&](const std::string& line) {
        if (!quiet) fmt::print("{}\n", line);
    };
    say(describe(o) + ranks_note(ctx, shard, "sequences") +
        (o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1)));
    // Every file is written at the end, atomically: a run that fails leaves nothing behind.
    TrainRecord run = run_train_steps(
        o, first_step, quiet, {"exact_match", "token_accuracy"},
        [&](int step) {
            const double lr = schedule.apply(adam, std::size_t(step));
            // Every rank draws the whole global batch (the data of one process) and trains on its rows.
            const auto batch = sort_task::make_batch(std::size_t(o.batch), o.model.seq, o.model.vocab, data_gen)
                                   .rows(shard.begin, shard.end);
            const auto loss = cross_entropy(model(batch), batch.targets);
            return StepResult{data_parallel_step(ctx, data_parallel, adam, loss), lr};
        },
        [&] {
            const std::size_t rows = eval_shard.size(), tokens = my_held_out.targets.size();
            const sort_task::Score s = rows == 0 ? sort_task::Score{} : sort_task::score(model, my_held_out);
            return std::vector{global_fraction(ctx, s.exact_match, rows, held_out.src.shape(0)),
                               global_fraction(ctx, s.token_accuracy, tokens, held_out.targets.size())};
        });
    const double loss_value = run.loss, exact_match = run.scores[0], token_accuracy = run.scores[1];
    say(fmt::format("finished {} steps in {:.1f} s: loss {:.4f}, held-out exact match {:.4f}, token accuracy {:.4f}",
                    o.steps - first_step + 1, run.seconds, loss_value, exact_match, token_accuracy));
    if (o.out.empty()) return 0;
    const nlohmann::json metrics = {{"steps", o.steps},
                                    {"final_loss", loss_value},
                                    {"exact_match", exact_match},
                                    {"token_accuracy", token_accuracy},
                                    {"eval_sequences", o.eval_sequences},
                                    {"seconds", run.seconds},
                                    {"seed", o.seed}};
    run.curve.title = fmt::format("sort task: {} digits, d_model {}, {} heads, {}+{} layers", o.model.seq, o.model.d_model,
                              o.model.heads, o.model.layers, o.model.layers);
    run.curve.accuracy_name = "held-out exact match";
    write_train_outputs(ctx, o.out, metrics, run.csv, run.curve,
                        root ? attention_picture(model, held_out, o.steps) : std::vector<unsigned char>{}, model, adam,
                        o.steps, generators, o.model.config());
    say(fmt::format("wrote {}: metrics.json, loss.csv, loss.png, attention.png, checkpoint.npz", o.out));
    return 0;
}

}  // namespace

void setup_train_sort(CLI::App& sort) {
    static SortOptions o;
    sort.add_option("--seq", o.model.seq, "digits to sort")->check(between(1, 64));
    sort.add_option("--vocab", o.model.vocab, "digits 0..vocab-1 (plus a BOS token)")->check(between(2, 1000));
    sort.add_option("--d-model", o.model.d_model, "model dimension")->check(at_least(1));
    sort.add_option("--heads", o.model.heads, "attention heads (must divide --d-model)")->check(at_least(1));
    sort.add_option("--ffn", o.model.ffn, "feed-forward dimension")->check(at_least(1));
    sort.add_option("--layers", o.model.layers, "encoder layers and decoder layers, each")->check(between(1, 16));
    sort.add_option("--steps", o.steps, "training steps")->check(at_least(1));
    sort.add_option("--batch", o.batch, "sequences per step (under mpirun: in all, split evenly over the ranks)")->check(at_least(1));
    sort.add_option("--lr", o.lr, "Adam learning rate after the warmup")->check(positive());
    sort.add_option("--warmup", o.warmup, "steps of linear learning-rate warmup from 0")->check(at_least(0));
    sort.add_option("--decay-steps", o.decay_steps,
                    "the learning rate falls from --lr after the warmup to --lr/20 at this step (a half cosine), "
                    "whatever --steps is")
        ->check(at_least(1));
    sort.add_option("--eval-sequences", o.eval_sequences, "held-out sequences, decoded greedily")->check(at_least(1));
    add_train_run_options(sort, o);
    add_data_parallel_options(sort, o);
    sort.callback([] { selected_action() = [] { return train_sort(o); }; });
}

}  // namespace xgrad::cli
