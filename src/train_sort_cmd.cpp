// `xgrad train sort`: a small nn::Transformer learns to sort a sequence of digits (teacher forcing
// under a causal mask, Adam with a linear warmup); held-out sequences are decoded greedily and
// scored by exact match and token accuracy.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include <fmt/core.h>
#include <nlohmann/json.hpp>
#include <xtensor/xview.hpp>

#include "commands.hpp"
#include "plot.hpp"
#include "sort_task.hpp"
#include "train_common.hpp"
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
    const dist::Context& ctx = process_group();  // one process: train sort is not data-parallel
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
    Generator held_out_draws = held_out_gen;
    const auto held_out = sort_task::make_batch(std::size_t(o.eval_sequences), o.model.seq, o.model.vocab, held_out_draws);

    const auto say = [&](const std::string& line) {
        if (!o.quiet) fmt::print("{}\n", line);
    };
    say(describe(o) + (o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1)));
    TrainProgress progress = train_progress(o, first_step, o.quiet);
    // Every file is written at the end, atomically: a run that fails leaves nothing behind.
    std::string csv = "step,loss,exact_match,token_accuracy,lr\n";
    LossCurve curve;
    const auto start = std::chrono::steady_clock::now();
    double loss_value = 0;
    sort_task::Score score;
    for (int step = first_step; step <= o.steps; ++step) {
        const double lr = schedule.apply(adam, std::size_t(step));
        const auto batch = sort_task::make_batch(std::size_t(o.batch), o.model.seq, o.model.vocab, data_gen);
        auto loss = cross_entropy(model(batch), batch.targets);
        backward(loss);
        adam.step();
        adam.zero_grad();
        tape().clear();
        loss_value = loss.value()();
        const bool eval_now = step % o.eval_every == 0 || step == o.steps;
        if (eval_now) {
            score = sort_task::score(model, held_out);
            curve.eval_steps.push_back(step), curve.accuracy.push_back(score.exact_match);
        }
        curve.steps.push_back(step), curve.loss.push_back(loss_value);
        csv += eval_now ? fmt::format("{},{},{},{},{}\n", step, loss_value, score.exact_match, score.token_accuracy, lr)
                        : fmt::format("{},{},,,{}\n", step, loss_value, lr);
        progress.update(step, loss_value, eval_now ? std::optional(score.exact_match) : std::nullopt);
    }
    progress.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    say(fmt::format("finished {} steps in {:.1f} s: loss {:.4f}, held-out exact match {:.4f}, token accuracy {:.4f}",
                    o.steps - first_step + 1, seconds, loss_value, score.exact_match, score.token_accuracy));
    if (o.out.empty()) return 0;
    const nlohmann::json metrics = {{"steps", o.steps},
                                    {"final_loss", loss_value},
                                    {"exact_match", score.exact_match},
                                    {"token_accuracy", score.token_accuracy},
                                    {"eval_sequences", o.eval_sequences},
                                    {"seconds", seconds},
                                    {"seed", o.seed}};
    curve.title = fmt::format("sort task: {} digits, d_model {}, {} heads, {}+{} layers", o.model.seq, o.model.d_model,
                              o.model.heads, o.model.layers, o.model.layers);
    curve.accuracy_name = "held-out exact match";
    write_train_outputs(ctx, o.out, metrics, csv, curve, attention_picture(model, held_out, o.steps), model, adam,
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
    sort.add_option("--batch", o.batch, "sequences per step")->check(at_least(1));
    sort.add_option("--lr", o.lr, "Adam learning rate after the warmup")->check(positive());
    sort.add_option("--warmup", o.warmup, "steps of linear learning-rate warmup from 0")->check(at_least(0));
    sort.add_option("--decay-steps", o.decay_steps,
                    "the learning rate falls from --lr after the warmup to --lr/20 at this step (a half cosine), "
                    "whatever --steps is")
        ->check(at_least(1));
    sort.add_option("--eval-sequences", o.eval_sequences, "held-out sequences, decoded greedily")->check(at_least(1));
    add_train_run_options(sort, o);
    sort.callback([] { selected_action() = [] { return train_sort(o); }; });
}

}  // namespace xgrad::cli
