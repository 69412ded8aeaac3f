// `xgrad train gpt`: a GPT (nn::GPT) learns a text with nanoGPT's train.py recipe under its option
// names (commands/train_decoder.hpp, shared with `train llama`). --init-from DIR starts from a model
// folder (io/gpt_folder.hpp; nanoGPT's init_from): its config, weights and tokenizer; --out writes
// that folder layout beside the checkpoint.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands/train_decoder.hpp"

namespace xgrad::cli {
namespace {

struct GptFamily {
    using Model = nn::GPT<float>;
    static constexpr const char* command = "train gpt";
    static constexpr const char* name = "GPT";
    nn::GPTConfig model{.n_layer = 4, .n_head = 4, .n_embd = 128, .block_size = 64, .vocab_size = 0, .dropout = 0,
                        .bias = false, .gelu = nn::GeluForm::erf};
    std::string gelu = "erf", tokenizer_name = "char", init_from;
    std::vector<std::string> given;  // the model options given on the command line (--init-from checks them)

    std::size_t block_size() const { return model.block_size; }
    text::Tokenizer tokenizer(const DecoderTrainOptions&, const text::Corpus& corpus) {
        if (!init_from.empty()) {  // the folder's, and its config
            text::Tokenizer tok = io::read_gpt2_tokenizer(init_from, io::read_gpt2_config(std::filesystem::path(init_from) / "config.json"));
            model = init_from_config(tok);
            return tok;
        }
        return tokenizer_name == "byte" ? text::Tokenizer::bytes() : text::Tokenizer::characters(corpus.text(), corpus.name());
    }
    text::Tokenizer saved_tokenizer(const io::CheckpointConfig& c, const std::string& source) {
        if (!init_from.empty()) model = init_from_config(io::read_gpt2_tokenizer(init_from, io::read_gpt2_config(std::filesystem::path(init_from) / "config.json")));
        return gpt_task::saved_model(c, source).tokenizer;
    }
    Model make(const text::Tokenizer& tok, Generator& gen) {
        if (init_from.empty()) {
            model.vocab_size = tok.vocab_size();
            model.gelu = gelu == "tanh" ? nn::GeluForm::tanh : nn::GeluForm::erf;
        }
        Model m(model, gen);
        if (!init_from.empty()) {
            const auto weights = std::filesystem::path(init_from) / "model.safetensors";
            io::load_gpt_state_dict(m, io::read_gpt2_safetensors(weights, model), weights.string());
        }
        return m;
    }
    io::CheckpointConfig checkpoint_config(const text::Tokenizer& tok) const { return gpt_task::checkpoint_config(model, tok); }
    std::string describe() const {
        return fmt::format("{} layers, {} heads, embed {}, block {}", model.n_layer, model.n_head, model.n_embd, model.block_size);
    }
    std::string write_model(const Model& m, const text::Tokenizer& tok, const std::filesystem::path& out) const {
        io::save_gpt_folder(m, tok, out);  // the model folder
        return fmt::format("config.json, model.safetensors, {}",
                           tok.kind() == text::Tokenizer::Kind::bpe ? "vocab.json, merges.txt" : io::xgrad_tokenizer_file);
    }

    // --init-from: the folder's config, refusing a model option given with another value.
    nn::GPTConfig init_from_config(const text::Tokenizer& folder_tok) const {
        const std::filesystem::path config_json = std::filesystem::path(init_from) / "config.json";
        nn::GPTConfig c = io::read_gpt2_config(config_json);
        const auto bpe = folder_tok.kind() == text::Tokenizer::Kind::bpe;
        const std::string kind = bpe ? "BPE" : folder_tok.kind() == text::Tokenizer::Kind::byte ? "byte" : "char";  // --tokenizer's names
        const std::map<std::string, std::pair<std::string, std::string>> mine_folder{
            {"--n_layer", {std::to_string(model.n_layer), std::to_string(c.n_layer)}},
            {"--n_head", {std::to_string(model.n_head), std::to_string(c.n_head)}},
            {"--n_embd", {std::to_string(model.n_embd), std::to_string(c.n_embd)}},
            {"--block_size", {std::to_string(model.block_size), std::to_string(c.block_size)}},
            {"--bias", {model.bias ? "on" : "off", c.bias ? "on" : "off"}},
            {"--gelu", {gelu, c.gelu == nn::GeluForm::tanh ? "tanh" : "erf"}},
            {"--tokenizer", {tokenizer_name, kind}}};
        for (const auto& name : given)
            if (const auto& [mine, folder] = mine_folder.at(name); mine != folder)
                throw value_error(fmt::format("{} {} contradicts --init-from {} ({} there); the model comes from the folder",
                                              name, mine, init_from, folder));
        c.dropout = model.dropout;
        return c;
    }
};

}  // namespace

void setup_train_gpt(CLI::App& cmd) {
    static GptFamily family;
    static DecoderTrainOptions o;
    add_decoder_train_options(cmd, o);
    cmd.add_option("--tokenizer", family.tokenizer_name, "char (the text's characters, nanoGPT's shakespeare_char) or byte")
        ->check(CLI::IsMember({"char", "byte"}));
    nn::GPTConfig& m = family.model;
    cmd.add_option("--n_layer", m.n_layer, "transformer blocks")->check(between(1, 96));
    cmd.add_option("--n_head", m.n_head, "attention heads (must divide --n_embd)")->check(between(1, 128));
    cmd.add_option("--n_embd", m.n_embd, "embedding width")->check(between(1, 16384));
    cmd.add_option("--block_size", m.block_size, "context length (tokens)")->check(between(1, 65536));
    cmd.add_option("--dropout", m.dropout, "dropout everywhere nanoGPT has it")->check(between(0, 0.99));
    cmd.add_flag("--bias,!--no-bias", m.bias, "biases in Linear and LayerNorm (default off, as nanoGPT's train.py)");
    cmd.add_option("--gelu", family.gelu, "erf (nanoGPT's nn.GELU) or tanh (GPT-2, llm.c)")->check(CLI::IsMember({"erf", "tanh"}));
    cmd.add_option("--init-from", family.init_from,
                   "a model folder (config.json, model.safetensors, its tokenizer) to fine-tune: the model, its weights "
                   "and its tokenizer come from it (default: none, random weights)")
        ->check(CLI::ExistingDirectory);
    cmd.callback([&cmd] {
        family.given.clear();
        for (const char* name : {"--n_layer", "--n_head", "--n_embd", "--block_size", "--bias", "--gelu", "--tokenizer"})
            if (cmd.get_option(name)->count() > 0) family.given.emplace_back(name);
        if (family.init_from.empty() && family.model.n_embd % family.model.n_head != 0)
            throw CLI::ValidationError("--n_head", fmt::format("must divide --n_embd {}", family.model.n_embd));
        selected_action() = [] { return train_decoder(family, o); };
    });
}

}  // namespace xgrad::cli
