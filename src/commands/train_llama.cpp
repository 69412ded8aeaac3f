// `xgrad train llama`: a Llama (nn::Llama, llama2.c's model.py) learns a text with `train gpt`'s
// recipe and options (commands/train_decoder.hpp) and llama2.c's model option names. Its tokenizer
// is by default a SentencePiece BPE learned from the text as llama2.c's `tinystories.py
// train_vocab --vocab_size` learns it, or a given tokenizer.model, or the text's characters or bytes.
// `xgrad export --to llama2c` turns the checkpoint into the files run.c reads.
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/core.h>

#include "commands/train_decoder.hpp"
#include "tasks/llama.hpp"

namespace xgrad::cli {
namespace {

struct LlamaFamily {
    using Model = nn::Llama<float>;
    static constexpr const char* command = llama_task::command;
    static constexpr const char* name = "Llama";
    nn::LlamaConfig model{.dim = 128, .n_layers = 4, .n_heads = 4, .vocab_size = 0, .multiple_of = 32, .max_seq_len = 64};
    std::string tokenizer_name = "sentencepiece", tokenizer_model;
    std::size_t vocab_size = 512;

    std::size_t block_size() const { return model.max_seq_len; }
    text::Tokenizer tokenizer(const DecoderTrainOptions& o, const text::Corpus& corpus) const {
        if (!tokenizer_model.empty()) return text::Tokenizer::sentencepiece(tokenizer_model);
        if (tokenizer_name == "byte") return text::Tokenizer::bytes();
        if (tokenizer_name == "char") return text::Tokenizer::characters(corpus.text(), corpus.name());
        const auto threads = std::size_t(o.threads > 0 ? o.threads : int(std::thread::hardware_concurrency()));
        return text::Tokenizer(text::SentencePieceModel::train(corpus.text(), vocab_size, corpus.name(), threads));
    }
    text::Tokenizer saved_tokenizer(const io::CheckpointConfig& c, const std::string& source) const {
        return llama_task::saved_llama(c, source).tokenizer;
    }
    Model make(const text::Tokenizer& tok, Generator& gen) {
        model.vocab_size = tok.vocab_size();
        model.validate();
        return Model(model, gen);
    }
    io::CheckpointConfig checkpoint_config(const text::Tokenizer& tok) const {
        return llama_task::checkpoint_config(model, tok);
    }
    std::string describe() const {
        return fmt::format("{} layers, {} heads ({} key/value), dim {}, hidden {}, max_seq_len {}", model.n_layers,
                           model.n_heads, model.kv_heads(), model.dim, model.ffn_hidden(), model.max_seq_len);
    }
    // The folder in Hugging Face's layout (its tokenizer file is also the checkpoint's)
    std::string write_model(const Model& m, const text::Tokenizer& tok, const std::filesystem::path& out) const {
        io::save_llama_folder(m, tok, out);
        return fmt::format("config.json, model.safetensors, {}", tok.kind() == text::Tokenizer::Kind::sentencepiece
                                                                     ? io::sentencepiece_file
                                                                     : io::xgrad_tokenizer_file);
    }
};

}  // namespace

void setup_train_llama(CLI::App& cmd) {
    static LlamaFamily family;
    static DecoderTrainOptions o;
    add_decoder_train_options(cmd, o);
    cmd.add_option("--tokenizer", family.tokenizer_name,
                   "sentencepiece (a BPE of --vocab_size pieces learned from the text, llama2.c's train_vocab), "
                   "char (the text's characters) or byte")
        ->check(CLI::IsMember({"sentencepiece", "char", "byte"}));
    cmd.add_option("--vocab_size", family.vocab_size, "pieces of the SentencePiece vocabulary learned from the text")
        ->check(between(260, 1 << 20));
    cmd.add_option("--tokenizer-model", family.tokenizer_model,
                   "a SentencePiece tokenizer.model to use instead (Llama 2's, llama2.c's) (default: none)")
        ->check(existing_file_on_rank0());
    nn::LlamaConfig& m = family.model;
    cmd.add_option("--dim", m.dim, "model width")->check(between(2, 16384));
    cmd.add_option("--n_layers", m.n_layers, "transformer blocks")->check(between(1, 128));
    cmd.add_option("--n_heads", m.n_heads, "query heads (must divide --dim)")->check(between(1, 256));
    cmd.add_option("--n_kv_heads", m.n_kv_heads, "key/value heads, dividing --n_heads (default: --n_heads)")
        ->check(between(1, 256));
    cmd.add_option("--multiple_of", m.multiple_of, "the feed-forward's hidden size is rounded up to a multiple of it")
        ->check(between(1, 65536));
    cmd.add_option("--hidden_dim", m.hidden_dim, "the feed-forward's hidden size (default: llama2.c's rule)")
        ->check(between(1, 1 << 20));
    cmd.add_option("--max_seq_len", m.max_seq_len, "context length (tokens)")->check(between(1, 65536));
    cmd.add_option("--dropout", m.dropout, "dropout everywhere model.py has it")->check(between(0, 0.99));
    cmd.add_option("--norm_eps", m.norm_eps, "RMSNorm's epsilon")->check(at_least(0));
    cmd.add_option("--rope_theta", m.rope_theta, "the rotary embedding's base")->check(positive());
    cmd.callback([&cmd] {
        if (cmd.get_option("--tokenizer-model")->count() > 0 &&
            (cmd.get_option("--tokenizer")->count() > 0 || cmd.get_option("--vocab_size")->count() > 0))
            throw CLI::ValidationError("--tokenizer-model", "gives the tokenizer: leave out --tokenizer and --vocab_size");
        try {
            nn::LlamaConfig c = family.model;
            c.vocab_size = 1;
            c.validate();
        } catch (const value_error& e) {
            throw CLI::ValidationError("the model", e.what());
        }
        selected_action() = [] { return train_decoder(family, o); };
    });
}

}  // namespace xgrad::cli
