// `xgrad train copy`: embedding + positions + causal MultiheadAttention + linear head learn the
// copy task with Adam; held-out token accuracy on the copied half is reported and saved.
#include <cblas.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "copy_task.hpp"
#include "xgrad/io/state_dict.hpp"

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
    std::string out;
};

int train_copy(const CopyOptions& o) {
    namespace fs = std::filesystem;
    openblas_set_num_threads(o.threads);
    Generator init_gen(o.seed), data_gen(o.seed + 1), eval_gen(o.seed + 2);
    copy_task::Model<float> model(o.model, init_gen);
    optim::Adam adam(model, {.lr = o.lr});
    const auto held_out = copy_task::make_batch(o.eval_sequences, o.model.seq, o.model.vocab, eval_gen);

    if (!o.out.empty()) fs::create_directories(o.out);
    std::ofstream csv;
    if (!o.out.empty()) csv.open(fs::path(o.out) / "loss.csv"), csv << "step,loss,accuracy,lr\n";
    fmt::print("copy task: {} tokens from a vocabulary of {}, embed {}, {} heads, batch {}, Adam lr {}\n",
               o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr);
    const auto start = std::chrono::steady_clock::now();
    double loss_value = 0, acc = 0;
    int step = 0;
    for (step = 1; step <= o.steps; ++step) {
        const auto batch = copy_task::make_batch(o.batch, o.model.seq, o.model.vocab, data_gen);
        auto loss = cross_entropy(model(batch.tokens), batch.targets);
        backward(loss);
        adam.step();
        adam.zero_grad();
        tape().clear();
        loss_value = loss.value()();
        const bool eval_now = step % o.eval_every == 0 || step == o.steps;
        if (eval_now) acc = copy_task::accuracy(model, held_out);
        if (csv.is_open()) csv << step << ',' << loss_value << ',' << (eval_now ? fmt::format("{}", acc) : "") << ',' << o.lr << '\n';
        if (eval_now) fmt::print("step {:5d}  loss {:.4f}  held-out accuracy {:.4f}\n", step, loss_value, acc);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("finished {} steps in {:.1f} s: loss {:.4f}, held-out token accuracy {:.4f}\n", o.steps, seconds,
               loss_value, acc);
    if (!o.out.empty()) {
        const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss_value}, {"accuracy", acc},
                                        {"seconds", seconds}, {"seed", o.seed}};
        std::ofstream(fs::path(o.out) / "metrics.json") << metrics.dump(2) << '\n';
        io::save_state_dict(model, fs::path(o.out) / "checkpoint.npz");
        fmt::print("wrote {}/metrics.json, loss.csv, checkpoint.npz\n", o.out);
    }
    return 0;
}

}  // namespace

void add_train_copy_command(CLI::App& train) {
    auto* copy = train.add_subcommand("copy", "attention learns to copy a token sequence (Adam)");
    static CopyOptions o;
    copy->add_option("--seq", o.model.seq, "tokens to copy")->check(CLI::Range(1, 256));
    copy->add_option("--vocab", o.model.vocab, "vocabulary size (plus a separator)")->check(CLI::Range(2, 100000));
    copy->add_option("--embed", o.model.embed, "embedding dimension")->check(CLI::PositiveNumber);
    copy->add_option("--heads", o.model.heads, "attention heads (must divide --embed)")->check(CLI::PositiveNumber);
    copy->add_option("--steps", o.steps, "training steps")->check(CLI::PositiveNumber);
    copy->add_option("--batch", o.batch, "sequences per step")->check(CLI::PositiveNumber);
    copy->add_option("--lr", o.lr, "Adam learning rate")->check(CLI::PositiveNumber);
    copy->add_option("--seed", o.seed, "random seed (same seed, same losses)");
    copy->add_option("--threads", o.threads, "BLAS threads")->check(CLI::Range(1, 64));
    copy->add_option("--eval-every", o.eval_every, "held-out evaluation every N steps")->check(CLI::PositiveNumber);
    copy->add_flag("--causal,!--no-causal", o.model.causal, "causal attention mask (default on)");
    copy->add_option("--out", o.out, "folder for metrics.json, loss.csv and checkpoint.npz");
    copy->callback([] { selected_action() = [] { return train_copy(o); }; });
}

}  // namespace xgrad::cli
