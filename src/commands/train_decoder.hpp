// What `train gpt` and `train llama` share: nanoGPT's train.py recipe under its option names (AdamW
// with weight decay on the >= 2-D parameters, warmup and cosine decay, gradient accumulation and
// clipping; train and val loss every eval_interval steps and before the first, a sample printed at
// each), atomic checkpoints that resume bit for bit, data-parallel under mpirun (--batch_size is the
// global batch), and the run's folder. A family (GptFamily, LlamaFamily) adds its model options,
// tokenizer, checkpoint config and model files:
//
//   struct Family {
//       using Model = ...;                                  // a CachedDecoder with loss(x, y)
//       static constexpr const char* command = "train ...", *name = "...";
//       std::size_t block_size() const;                    // the training window
//       text::Tokenizer tokenizer(const DecoderTrainOptions&, const text::Corpus&);  // a fresh run's
//       text::Tokenizer saved_tokenizer(const io::CheckpointConfig&, const std::string& source);  // --resume
//       Model make(const text::Tokenizer&, Generator&);    // sizes the vocabulary, loads starting weights
//       io::CheckpointConfig checkpoint_config(const text::Tokenizer&) const;
//       std::string describe() const;                      // "4 layers, 4 heads, ..." for the first line
//       std::string write_model(const Model&, const text::Tokenizer&, const std::filesystem::path&);
//   };                                                     // ^ files beside the checkpoint; their names
#pragma once
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "commands/distributed.hpp"
#include "commands/train_common.hpp"
#include "study/plot.hpp"
#include "tasks/gpt.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/ops/autocast.hpp"
#include "xgrad/optim/clip.hpp"
#include "xgrad/optim/schedule.hpp"

namespace xgrad::cli {

struct DecoderTrainOptions {
    int batch_size = 12, gradient_accumulation_steps = 1;
    // nanoGPT's CPU recipe but for the learning rate, 3e-3 not 1e-3: on the fortunes text its val loss
    // is 1.89-1.91 against 2.04, and layer 0 forms a previous-token head in every seed tried (docs/gpt.md)
    double learning_rate = 3e-3, min_lr = 1e-4, beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1, grad_clip = 1.0;
    int steps = 2000, warmup_iters = 100, lr_decay_iters = 2000;  // steps: --max_iters
    int eval_every = 250, eval_iters = 20;                         // eval_every: --eval_interval
    int checkpoint_every = 0;  // 0: at each evaluation
    int sample_tokens = 200;
    std::string text, dtype = "float32";
    std::uint64_t seed = 1337;
    int threads = 0;
    int log_every = 100;
    bool quiet = false, verbose = false, deterministic = false;
    std::string out, resume;
    std::string checkpoint_format = "npz";
    std::string checkpoint_name() const { return "checkpoint." + checkpoint_format; }
};

// The options both commands take, under nanoGPT's names (the model's are the family's).
inline void add_decoder_train_options(CLI::App& cmd, DecoderTrainOptions& o) {
    cmd.add_option("--text", o.text, "a UTF-8 text file (default: the fortunes package's files)")
        ->check(existing_file_on_rank0());
    cmd.add_option("--batch_size", o.batch_size, "sequences per micro-step (under mpirun: in all)")->check(at_least(1));
    cmd.add_option("--gradient_accumulation_steps", o.gradient_accumulation_steps, "micro-steps per optimizer step")
        ->check(at_least(1));
    cmd.add_option("--learning_rate", o.learning_rate, "AdamW's peak learning rate")->check(positive());
    cmd.add_option("--max_iters", o.steps, "optimizer steps (0: evaluate and write the model only)")->check(at_least(0));
    cmd.add_option("--warmup_iters", o.warmup_iters, "linear warmup steps")->check(at_least(0));
    cmd.add_option("--lr_decay_iters", o.lr_decay_iters, "the cosine reaches min_lr here")->check(at_least(0));
    cmd.add_option("--min_lr", o.min_lr, "the last learning rate")->check(at_least(0));
    cmd.add_option("--beta1", o.beta1, "AdamW beta1")->check(between(0, 0.999999));
    cmd.add_option("--beta2", o.beta2, "AdamW beta2")->check(between(0, 0.999999));
    cmd.add_option("--weight_decay", o.weight_decay, "AdamW's decay of the >= 2-D parameters")->check(at_least(0));
    cmd.add_option("--grad_clip", o.grad_clip, "clip the gradient norm to it (0: off)")->check(at_least(0));
    cmd.add_option("--eval_interval", o.eval_every, "train and val loss (and a sample) every N steps")->check(at_least(1));
    cmd.add_option("--eval_iters", o.eval_iters, "batches per split at each evaluation")->check(at_least(1));
    cmd.add_option("--checkpoint-every", o.checkpoint_every,
                   "write the checkpoint every N steps (default: at each evaluation)")
        ->check(at_least(1));
    cmd.add_option("--checkpoint-format", o.checkpoint_format,
                   "npz or safetensors: --out/checkpoint.npz or checkpoint.safetensors (the model, the optimizer, the "
                   "generators and the config; every reader takes either)")
        ->check(CLI::IsMember({"npz", "safetensors"}));
    cmd.add_option("--sample-tokens", o.sample_tokens, "length of the sample shown at each evaluation")
        ->check(between(1, 100000));
    cmd.add_option("--dtype", o.dtype,
                   "float32, or bfloat16: matmuls take bfloat16 operands (float32 accumulation, weights, "
                   "optimizer and loss), as nanoGPT's --dtype=bfloat16 autocast")
        ->check(CLI::IsMember({"float32", "bfloat16"}));
    cmd.add_option("--seed", o.seed, "random seed (same seed and threads, same run)");
    cmd.add_option("--threads", o.threads, "threads (default: every core, at most 8)")->check(between(0, 64));
    add_progress_options(cmd, o);
    cmd.add_option("--out", o.out, "folder for metrics.json, loss.csv, loss.png, attention.png, samples.txt, "
                                   "the checkpoint and the model's files (default: none)");
    cmd.add_option("--resume", o.resume, "continue from a checkpoint (.npz or .safetensors) of a run with the same options, up to --max_iters")
        ->check(existing_file_on_rank0());
    add_data_parallel_options(cmd, o);
}

namespace decoder_training {

// What this rank trains on: every rank draws the whole global batch, then keeps its rows.
struct Batch {
    xt::xtensor<std::int64_t, 2> x, y, my_x, my_y;
    void draw(const text::Windows& w, text::Split split, std::size_t batch_size, std::size_t T, Generator& gen,
              const Shard& shard) {
        w.batch(split, batch_size, T, gen, x, y);
        const std::size_t rows = shard.end - shard.begin;
        if (my_x.shape()[0] != rows || my_x.shape()[1] != T) my_x.resize({rows, T}), my_y.resize({rows, T});
        std::copy(&x(shard.begin, 0), &x(shard.begin, 0) + rows * T, my_x.data());
        std::copy(&y(shard.begin, 0), &y(shard.begin, 0) + rows * T, my_y.data());
    }
};

// nanoGPT's estimate_loss: the mean loss of eval_iters batches of each split (dropout off).
template <class Model>
std::array<double, 2> estimate_loss(const dist::Context& ctx, Model& model, const text::Windows& w,
                                    const DecoderTrainOptions& o, std::size_t T, Generator& gen, const Shard& shard,
                                    Batch& batch) {
    const NoGrad no_grad;
    set_training(model, false);
    std::array<double, 2> out{};
    for (const auto split : {text::Split::train, text::Split::val}) {
        double total = 0;
        for (int k = 0; k < o.eval_iters; ++k) {
            batch.draw(w, split, std::size_t(o.batch_size), T, gen, shard);
            total += global_mean(ctx, double(model.loss(batch.my_x, batch.my_y).value()()));
        }
        out[split == text::Split::train ? 0 : 1] = total / o.eval_iters;
    }
    set_training(model, true);
    return out;
}

// A sample of `tokens` tokens after a newline, as nanoGPT's sample.py starts ("\n"; a character
// vocabulary without it: after the character of id 0).
template <class Model>
std::string sample_text(const Model& model, const text::Tokenizer& tok, int tokens, Generator& gen) {
    const std::vector<std::int64_t> start =
        tok.encodes_whole_texts() ? tok.encode("\n")
                                  : std::vector<std::int64_t>{tok.contains(U'\n') ? tok.encode("\n").front() : 0};
    xt::xtensor<std::int64_t, 2> prompt = xt::xtensor<std::int64_t, 2>::from_shape({1, start.size()});
    std::copy(start.begin(), start.end(), prompt.data());
    auto copy = model;
    set_training(copy, false);
    const auto ids = nn::generate(copy, prompt, std::size_t(tokens), gen,
                                  {.temperature = 0.8, .top_k = 200, .vocab_size = tok.vocab_size()});
    return tok.decode(std::span(ids.data() + start.size(), std::size_t(tokens)));
}

// The rows of loss.csv up to step `upto`, also into the curve: a resumed run continues the file
// its checkpoint came with (columns step, loss, train_loss, val_loss, lr; step 0 has no loss).
inline std::string csv_rows_upto(const std::filesystem::path& csv, int upto, LossCurve& curve) {
    std::ifstream in(csv);
    std::string line, kept;
    while (std::getline(in, line)) {
        if (line.empty() || line.starts_with("step")) continue;
        std::vector<std::string> cells;
        std::stringstream fields(line);
        for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
        if (cells.size() < 4 || std::stoi(cells[0]) > upto) break;
        const double step = std::stod(cells[0]);
        if (!cells[1].empty()) curve.steps.push_back(step), curve.loss.push_back(std::stod(cells[1]));
        if (!cells[3].empty()) curve.eval_steps.push_back(step), curve.accuracy.push_back(std::stod(cells[3]));
        kept += line + "\n";
    }
    return kept;
}

inline const char* tokenizer_kind(const text::Tokenizer& tok) {
    switch (tok.kind()) {
    case text::Tokenizer::Kind::bpe: return "BPE";
    case text::Tokenizer::Kind::sentencepiece: return "SentencePiece";
    case text::Tokenizer::Kind::byte: return "byte";
    case text::Tokenizer::Kind::character: return "character";
    }
    return "";
}

}  // namespace decoder_training

template <class Family>
int train_decoder(Family& family, DecoderTrainOptions o) {
    using namespace decoder_training;
    std::optional<Autocast> autocast;  // --dtype bfloat16: every matmul of the run (nanoGPT's ctx)
    if (o.dtype == "bfloat16") autocast.emplace(MatmulPrecision::bfloat16);
    if (o.threads == 0) o.threads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
    set_num_threads(std::size_t(o.threads));
    const dist::Context& ctx = process_group();
    const Shard shard = even_shard(ctx, std::size_t(o.batch_size), "--batch_size");
    const bool root = ctx.is_root(), quiet = o.quiet || !root;
    const auto say = [&](const std::string& line) {
        if (!quiet) fmt::print("{}\n", line);
    };
    const text::Corpus corpus = o.text.empty() ? gpt_task::default_corpus() : text::Corpus::map_file(o.text);
    const text::Tokenizer tok = o.resume.empty() ? family.tokenizer(o, corpus)  // the checkpoint's: the text must fit it
                                                 : family.saved_tokenizer(dist::read_checkpoint_config(ctx, o.resume), o.resume);
    const text::Windows windows(corpus, tok, 0.1);
    const std::size_t T = family.block_size();

    Generator init_gen(o.seed), data_gen(o.seed + 1), eval_gen(o.seed + 2), sample_gen(o.seed + 3);
    typename Family::Model model = family.make(tok, init_gen);
    optim::AdamW adamw(optim::weight_decay_groups(model, o.weight_decay),
                       {.lr = o.learning_rate, .betas = {o.beta1, o.beta2}, .weight_decay = o.weight_decay});
    const optim::WarmupCosine schedule(o.learning_rate, std::size_t(o.warmup_iters), std::size_t(o.lr_decay_iters),
                                       o.min_lr, 1);
    io::NamedGenerators generators = named_generators(model, "model.");
    generators.insert(generators.end(), {{"data", &data_gen}, {"eval", &eval_gen}, {"sample", &sample_gen}});
    const auto config = family.checkpoint_config(tok);
    const int first_step = o.resume.empty() ? 1 : resume_checkpoint(ctx, o, Family::command, config, model, adamw, generators);
    dist::DataParallel<float> data_parallel(ctx, model, {.deterministic = o.deterministic});
    const auto params = adamw.parameters();

    say(fmt::format("{}: {} ({} parameters), {} {} tokens; {}: {} tokens, {} train / {} val; batch {} x {} accumulated, "
                    "AdamW lr {}, {}{}{}",
                    Family::name, family.describe(), model.num_params(), tok.vocab_size(), tokenizer_kind(tok),
                    corpus.name(), windows.tokens(), windows.tokens(text::Split::train),
                    windows.tokens(text::Split::val), o.batch_size, o.gradient_accumulation_steps, o.learning_rate,
                    o.dtype == "bfloat16" ? "bfloat16 matmuls" : "float32", ranks_note(ctx, shard, "sequences"),
                    o.resume.empty() ? "" : fmt::format(", resumed at step {}", first_step - 1)));

    const std::filesystem::path out(o.out);
    std::string csv = "step,loss,train_loss,val_loss,lr\n";
    LossCurve curve;
    std::vector<std::string> samples;
    if (!o.resume.empty())
        csv += csv_rows_upto(std::filesystem::path(o.resume).parent_path() / "loss.csv", first_step - 1, curve);
    std::array<double, 2> evaluated{NAN, NAN};
    Batch batch;
    const auto evaluate = [&](int step) {
        evaluated = estimate_loss(ctx, model, windows, o, T, eval_gen, shard, batch);
        curve.eval_steps.push_back(step), curve.accuracy.push_back(evaluated[1]);
        const std::string sample = root ? sample_text(model, tok, o.sample_tokens, sample_gen) : std::string();
        samples.push_back(sample);
        return sample;
    };
    bool tokenizer_written = false;
    const auto checkpoint = [&](int step) {
        if (o.out.empty()) return;
        if (root) std::filesystem::create_directories(out);
        if (root) write_text(out / "loss.csv", csv);  // before the checkpoint: a resume finds its rows
        // a checkpoint of a BPE or SentencePiece tokenizer reads its files beside it
        if (root && !tokenizer_written) io::write_folder_tokenizer(out, tok), tokenizer_written = true;
        dist::save_checkpoint(ctx, out / o.checkpoint_name(), model, adamw, step, generators, config);
    };
    if (first_step == 1) {
        const std::string sample = evaluate(0);
        csv += fmt::format("0,,{},{},{}\n", evaluated[0], evaluated[1], schedule.lr(0));
        say(fmt::format("step 0: train loss {:.4f}, val loss {:.4f}", evaluated[0], evaluated[1]));
        if (o.verbose) say(sample);
    }
    const double tokens_per_step = double(o.batch_size) * o.gradient_accumulation_steps * double(T);
    TrainProgress progress = train_progress(o, first_step, quiet, "val", tokens_per_step);
    const auto start = std::chrono::steady_clock::now();
    double loss = NAN;
    const int checkpoint_every = o.checkpoint_every > 0 ? o.checkpoint_every : o.eval_every;
    for (int s = first_step; s <= o.steps; ++s) {
        const double lr = schedule.apply(adamw, std::size_t(s - 1));  // nanoGPT's get_lr(iter), iter = s - 1
        double local = 0;
        for (int micro = 0; micro < o.gradient_accumulation_steps; ++micro) {
            batch.draw(windows, text::Split::train, std::size_t(o.batch_size), T, data_gen, shard);
            const auto micro_loss = model.loss(batch.my_x, batch.my_y) * float(1.0 / o.gradient_accumulation_steps);
            const Var<float, 0> scaled = eval(micro_loss);
            if (micro + 1 < o.gradient_accumulation_steps) {
                const auto no_sync = data_parallel.no_sync();
                backward(scaled, {.keep_intermediate_grads = false});
            } else {
                backward(scaled, {.keep_intermediate_grads = false});
            }
            local += scaled.value()();
            tape().clear();
        }
        data_parallel.synchronize();
        if (o.grad_clip > 0) optim::clip_grad_norm(params, o.grad_clip);
        adamw.step();
        adamw.zero_grad();
        loss = global_mean(ctx, local);
        const bool eval_now = s % o.eval_every == 0 || s == o.steps;
        std::string sample;
        if (eval_now) sample = evaluate(s);
        curve.steps.push_back(s), curve.loss.push_back(loss);
        csv += eval_now ? fmt::format("{},{},{},{},{}\n", s, loss, evaluated[0], evaluated[1], lr)
                        : fmt::format("{},{},,,{}\n", s, loss, lr);
        progress.update(s, loss, eval_now ? std::optional(evaluated[1]) : std::nullopt);
        if (eval_now && !quiet) {
            progress.finish();
            fmt::print("step {}: train loss {:.4f}, val loss {:.4f}\n{}\n", s, evaluated[0], evaluated[1], sample);
        }
        if (s % checkpoint_every == 0 && s != o.steps) checkpoint(s);
    }
    progress.finish();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_second = tokens_per_step * (o.steps - first_step + 1) / seconds;
    say(fmt::format("finished {} steps in {:.1f} s ({:.0f} tokens/s): train loss {:.4f}, val loss {:.4f}",
                    o.steps - first_step + 1, seconds, tokens_per_second, evaluated[0], evaluated[1]));
    if (o.out.empty()) return 0;
    const nlohmann::json metrics = {{"steps", o.steps}, {"final_loss", loss}, {"train_loss", evaluated[0]},
                                    {"val_loss", evaluated[1]}, {"seconds", seconds},
                                    {"tokens_per_second", tokens_per_second},
                                    {"parameters", model.num_params()}, {"seed", o.seed}, {"dtype", o.dtype},
                                    {"sample", samples.empty() ? "" : samples.back()}};
    curve.title = fmt::format("{} {} on {} ({} tokens), AdamW lr {}", Family::name, family.describe(), corpus.name(),
                              windows.tokens(), o.learning_rate);
    curve.accuracy_name = "val loss", curve.score_is_loss = true;
    std::vector<unsigned char> attention;
    if (root) attention = gpt_task::attention_png(model, tok, windows, o.steps);
    std::string model_files;
    if (root) std::filesystem::create_directories(out), model_files = family.write_model(model, tok, out);
    write_train_outputs(ctx, o.out, metrics, csv, curve, attention, model, adamw, o.steps, generators, config,
                        o.checkpoint_name());
    if (root) write_text(out / "samples.txt", fmt::format("{}\n", fmt::join(samples, "\n\n----\n\n")));
    say(fmt::format("wrote {}: metrics.json, loss.csv, loss.png, attention.png, samples.txt, {}; {}", o.out,
                    o.checkpoint_name(), model_files));
    return 0;
}

}  // namespace xgrad::cli
