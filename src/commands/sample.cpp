// `xgrad sample --checkpoint FILE`: text from a GPT or a Llama, streamed token by token as nanoGPT's
// sample.py prints it (with a key/value cache: each token costs one position's work). FILE is a
// `train gpt` or `train llama` checkpoint.npz (its tokenizer inside or beside), a nanoGPT state dict
// .npz with --vocab-text (the text its character vocabulary was built from) and --n_head, an llm.c
// model .bin (GPT-2's BPE ids), or a llama2.c checkpoint .bin (the file run.c reads); the last two
// hold no tokenizer: --tokenizer gives one (a GPT-2 folder, a tokenizer.model), else they print ids
// and take the prompt as --prompt-ids. `--model DIR` takes a folder in Hugging Face's GPT-2 layout
// (io/gpt_folder.hpp) instead, its BPE tokenizer inside. A SentencePiece tokenizer starts the prompt
// with its <s>, as run.c does. --temperature 0 is greedy; --print-ids prints the generated ids only,
// comma-separated, on one line.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"
#include "xgrad/nn/generate.hpp"

namespace xgrad::cli {
namespace {

struct SampleOptions {
    std::string checkpoint, model, prompt, prompt_ids, vocab_text, tokenizer;
    bool print_ids = false;
    std::size_t n_head = 0;
    int tokens = 500, samples = 1, top_k = 200, threads = 1;
    double temperature = 0.8;
    std::uint64_t seed = 1337;
};

// A nanoGPT state dict (numpy.savez of its state_dict()) with the character vocabulary of a text.
gpt_task::LoadedModel load_nanogpt(const SampleOptions& o) {
    if (o.vocab_text.empty() || o.n_head == 0)
        throw value_error(o.checkpoint + ": has no xgrad config; a nanoGPT state dict needs --vocab-text and --n_head");
    const auto arrays = io::read_arrays(o.checkpoint);
    const nn::GPTConfig c = gpt_task::nanogpt_config(arrays, o.n_head, nn::GeluForm::erf, o.checkpoint);
    const text::Corpus corpus = text::Corpus::map_file(o.vocab_text);
    gpt_task::LoadedModel m;
    m.tokenizer = text::Tokenizer::characters(corpus.text(), corpus.name());
    m.usable_vocab = m.tokenizer->vocab_size();
    if (m.usable_vocab > c.vocab_size)
        throw value_error(o.vocab_text + ": has " + std::to_string(m.usable_vocab) + " characters, the model only " +
                          std::to_string(c.vocab_size) + " tokens");
    Generator gen(0);
    m.model = nn::GPT<float>(c, gen);
    io::load_gpt_state_dict(m.model, arrays, o.checkpoint);
    set_training(m.model, false);
    return m;
}

// o.samples samples from `model` (a CachedDecoder), drawing ids below usable_vocab; the text through
// `tokenizer` when there is one, else ids.
template <class Model>
int sample_from(const Model& model, const text::Tokenizer* tokenizer, std::size_t usable_vocab, const SampleOptions& o) {
    std::vector<std::int64_t> start;
    if (!o.prompt_ids.empty()) {
        std::stringstream in(o.prompt_ids);
        for (std::string id; std::getline(in, id, ',');) start.push_back(std::stoll(id));
        for (const auto id : start)
            if (id < 0 || std::size_t(id) >= usable_vocab)
                throw value_error(fmt::format("--prompt-ids: {} is outside the vocabulary of {}", id, usable_vocab));
    } else if (const text::SentencePieceModel* sp = tokenizer ? tokenizer->sentencepiece_model() : nullptr) {
        if (sp->bos_id()) start.push_back(*sp->bos_id());  // run.c's encode(..., bos 1, eos 0)
        const auto ids = tokenizer->encode(o.prompt, "--prompt");
        start.insert(start.end(), ids.begin(), ids.end());
    } else if (tokenizer) {
        start = tokenizer->encode(o.prompt.empty() ? "\n" : o.prompt, "--prompt");
    } else {
        throw value_error(o.checkpoint + ": this model file holds no tokenizer; give --tokenizer M (a GPT-2 folder, a "
                                         "tokenizer.model) or the prompt as --prompt-ids");
    }
    if (start.empty()) throw value_error("--prompt: empty; give at least one character");
    xt::xtensor<std::int64_t, 2> prompt = xt::xtensor<std::int64_t, 2>::from_shape({1, start.size()});
    std::copy(start.begin(), start.end(), prompt.data());
    Generator gen(o.seed);
    nn::GenerateOptions g{.temperature = o.temperature, .top_k = std::size_t(o.top_k), .vocab_size = usable_vocab};
    if (o.print_ids) {  // each sample's new ids, one line each
        for (int k = 0; k < o.samples; ++k) {
            const auto out = nn::generate(model, prompt, std::size_t(o.tokens), gen, g);
            std::string line;
            for (std::size_t t = start.size(); t < out.shape()[1]; ++t)
                line += (t > start.size() ? "," : "") + std::to_string(out(0, t));
            fmt::print("{}\n", line);
        }
        return 0;
    }
    for (int k = 0; k < o.samples; ++k) {
        std::string shown;  // tokens are printed as they come (a byte token may end a UTF-8 character later)
        if (tokenizer) shown = tokenizer->decode(start);
        else for (const auto id : start) shown += fmt::format("{} ", id);
        fmt::print("{}", shown);
        std::fflush(stdout);
        g.on_token = [&](std::size_t, const std::vector<std::int64_t>& t) {
            std::string piece;
            if (tokenizer) tokenizer->append(piece, t[0]);
            else piece = fmt::format("{} ", t[0]);
            fmt::print("{}", piece);
            std::fflush(stdout);
        };
        nn::generate(model, prompt, std::size_t(o.tokens), gen, g);
        fmt::print("\n{}", k + 1 < o.samples ? "---------------\n" : "");
    }
    return 0;
}

// --tokenizer M in place of the model file's own (llm.c and llama2.c files have none).
template <class Loaded>
int sample_loaded(Loaded m, const SampleOptions& o) {
    gpt_task::use_tokenizer(m, o.tokenizer, o.model.empty() ? o.checkpoint : o.model);
    return sample_from(m.model, m.tokenizer ? &*m.tokenizer : nullptr, m.usable_vocab, o);
}

int sample(const SampleOptions& o) {
    set_num_threads(std::size_t(o.threads));
    if (o.checkpoint.empty() == o.model.empty()) throw value_error("give --checkpoint FILE or --model DIR (one of them)");
    if (const std::string source = o.model.empty() ? o.checkpoint : o.model; llama_task::is_llama(source))
        return sample_loaded(llama_task::load_llama(source), o);
    // a model folder, an llm.c .bin, a train gpt checkpoint (it has a config), or else a nanoGPT state dict
    const bool known = !o.model.empty() || o.checkpoint.ends_with(".bin");
    return sample_loaded(known || !io::read_checkpoint_config(o.checkpoint).empty()
                             ? gpt_task::load_model(o.model.empty() ? o.checkpoint : o.model)
                             : load_nanogpt(o),
                         o);
}

}  // namespace

void setup_sample(CLI::App& cmd) {
    static SampleOptions o;
    auto* checkpoint = cmd.add_option("--checkpoint", o.checkpoint,
                                      "a `train gpt` or `train llama` checkpoint (.npz or .safetensors), a nanoGPT state dict .npz, an "
                                      "llm.c .bin or a llama2.c checkpoint .bin")
                           ->check(CLI::ExistingFile);
    cmd.add_option("--model", o.model, "a GPT-2 or Llama folder in Hugging Face's layout (config.json, model.safetensors, "
                                       "the tokenizer's files), instead of --checkpoint (default: none)")
        ->check(CLI::ExistingDirectory)
        ->excludes(checkpoint);
    cmd.add_option("--prompt", o.prompt,
                   "the text to continue (default: a newline; with a SentencePiece tokenizer <s> alone, as run.c)");
    cmd.add_option("--tokenizer", o.tokenizer,
                   "a tokenizer for a model file without one (llm.c, llama2.c): a GPT-2 folder, a tokenizer.model, "
                   "anything `xgrad tokenize --model` takes (default: the model's)")
        ->check(CLI::ExistingPath);
    cmd.add_option("--prompt-ids", o.prompt_ids, "the prompt as token ids, comma-separated (llm.c and llama2.c files)");
    cmd.add_option("--tokens", o.tokens, "new tokens per sample")->check(between(1, 1000000));
    cmd.add_option("--samples", o.samples, "how many samples")->check(between(1, 10000));
    cmd.add_option("--temperature", o.temperature, "logits are divided by it (< 1: more likely tokens; 0: greedy)")
        ->check(at_least(0));
    cmd.add_flag("--print-ids", o.print_ids, "print only the generated ids, comma-separated, one line per sample");
    cmd.add_option("--top-k", o.top_k, "draw from the k most likely tokens only")->check(at_least(1));
    cmd.add_option("--seed", o.seed, "random seed (same seed, same samples)");
    cmd.add_option("--threads", o.threads, "threads")->check(between(1, 64));
    cmd.add_option("--vocab-text", o.vocab_text, "a nanoGPT state dict: the text whose characters are its vocabulary")
        ->check(CLI::ExistingFile);
    cmd.add_option("--n_head", o.n_head, "a nanoGPT state dict: its attention heads")->check(at_least(1));
    cmd.callback([] { selected_action() = [] { return sample(o); }; });
}

}  // namespace xgrad::cli
