// `xgrad train copy`: embedding + positions + causal MultiheadAttention + linear head learn the
// copy task with Adam; held-out token accuracy on the copied half is reported and saved.
#include <cblas.h>

#include <chrono>
#include <filesystem>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "copy_task.hpp"
#include "xgrad/io/checkpoint.hpp"

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
    std::string resume;
};

void write_text(const std::filesystem::path& path, const std::string& text) {
    io::write_file_atomic(path, text.data(), text.size());
}

int train_copy(const CopyOptions& o) {
    namespace fs = std::filesystem;
    openblas_set_num_threads(o.threads);
    Generator init_gen(o.seed), data_gen(o.seed + 1), held_out_gen(o.seed + 2);
    copy_task::Model<float> model(o.model, init_gen);
    optim::Adam adam(model, {.lr = o.lr});
    // What a checkpoint restores besides the weights and Adam: the data stream where it stopped and
    // the (never drawn from) source of the held-out set.
    const io::NamedGenerators generators{{"data", &data_gen}, {"held_out", &held_out_gen}};
    int first_step = 1;
    if (!o.resume.empty()) {
        const auto done = io::load_checkpoint(o.resume, model, adam, generators);
        if (done >= o.steps)
            throw value_error("train copy: --steps (" + std::to_string(o.steps) + ") must exceed the " +
                              std::to_string(done) + " steps already taken in " + o.resume);
        first_step = int(done) + 1;
    }
    Generator held_out_draws = held_out_gen;
    const auto held_out = copy_task::make_batch(o.eval_sequences, o.model.seq, o.model.vocab, held_out_draws);

    // Every file is written at the end, atomically: a run that fails leaves nothing behind.
    std::string csv = "step,loss,accuracy,lr\n";
    fmt::print("copy task: {} tokens from a vocabulary of {}, embed {}, {} heads, batch {}, Adam lr {}{}\n",
               o.model.seq, o.model.vocab, o.model.embed, o.model.heads, o.batch, o.lr,
               o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1));
    const auto start = std::chrono::steady_clock::now();
    double loss_value = 0, acc = 0;
    for (int step = first_step; step <= o.steps; ++step) {
        const auto batch = copy_task::make_batch(o.batch, o.model.seq, o.model.vocab, data_gen);
        auto loss = cross_entropy(model(batch.tokens), batch.targets);
        backward(loss);
        adam.step();
        adam.zero_grad();
        tape().clear();
        loss_value = loss.value()();
        const bool eval_now = step % o.eval_every == 0 || step == o.steps;
        if (eval_now) acc = copy_task::accuracy(model, held_out);
        csv += fmt::format("{},{},{},{}\n", step, loss_value, eval_now ? fmt::format("{}", acc) : "", o.lr);
        if (eval_now) fmt::print("step {:5d}  loss {:.4f}  held-out accuracy {:.4f}\n", step, loss_value, acc);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("finished {} steps in {:.1f} s: loss {:.4f}, held-out token accuracy {:.4f}\n", o.steps - first_step + 1,
               seconds, loss_value, acc);
    if (!o.out.empty()) {
        const fs::path out(o.out);
        fs::create_directories(out);
        const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss_value}, {"accuracy", acc},
                                        {"seconds", seconds}, {"seed", o.seed}};
        write_text(out / "metrics.json", metrics.dump(2) + "\n");
        write_text(out / "loss.csv", csv);
        io::save_checkpoint(out / "checkpoint.npz", model, adam, o.steps, generators);
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
    copy->add_option("--resume", o.resume,
                     "continue from a checkpoint.npz of a run with the same options, up to --steps in all")
        ->check(CLI::ExistingFile);
    copy->callback([] { selected_action() = [] { return train_copy(o); }; });
}

}  // namespace xgrad::cli
