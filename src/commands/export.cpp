// `xgrad export IN OUT`: a GPT from one of the files xgrad reads into another. IN is a `train gpt`
// checkpoint (.npz with its config), a nanoGPT state dict (.npz without one: --n_head, --gelu), a model
// folder (config.json, model.safetensors, the tokenizer: io/gpt_folder.hpp) or an llm.c model (.bin).
// OUT is a folder, a .npz (nanoGPT's state dict; with the config and a byte or character tokenizer,
// which xgrad's commands read as a checkpoint) or a .bin (llm.c), by its name or --to. A Llama (a
// `train llama` checkpoint or a llama2.c .bin) goes to llama2.c's files instead (export_llama).
// Everything is read and checked before anything is written: a folder appears whole
// (io::StagingDir), a file by a rename.
#include <filesystem>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"

namespace xgrad::cli {
namespace {

namespace fs = std::filesystem;

struct ExportOptions {
    std::string in, out, to, tokenizer, gelu = "erf";
    std::size_t n_head = 0;
    bool n_head_given = false, gelu_given = false;
};

// What OUT becomes: --to, or its name (*.npz, *.bin, else a folder; a name with another extension is
// refused, so that "model.safetensors" does not become a folder of that name).
std::string out_kind(const ExportOptions& o) {
    if (!o.to.empty()) return o.to;
    const fs::path out = io::detail::without_trailing_slash(o.out);
    std::error_code ec;
    if (out.extension() == ".npz") return "npz";
    if (out.extension() == ".bin") return "bin";
    if (fs::is_directory(out, ec) || !out.has_extension()) return "folder";
    throw value_error(fmt::format("{}: its name says no kind export writes (a folder, *.npz or *.bin): give --to", o.out));
}

// IN's model and tokenizer. A nanoGPT state dict is an .npz without xgrad's config.
gpt_task::LoadedModel read_in(const ExportOptions& o) {
    const bool nanogpt = !fs::is_directory(o.in) && !o.in.ends_with(".bin") && io::read_checkpoint_config(o.in).empty();
    if (!nanogpt && (o.n_head_given || o.gelu_given))
        throw value_error(fmt::format("{}: --n_head and --gelu are for a nanoGPT state dict; this file records its model",
                                      o.in));
    if (!nanogpt) return gpt_task::load_model(o.in);
    if (!o.n_head_given)
        throw value_error(o.in + ": a nanoGPT state dict (an .npz without xgrad's config) records no heads: give --n_head");
    const auto arrays = io::read_arrays(o.in);
    const nn::GPTConfig c =
        gpt_task::nanogpt_config(arrays, o.n_head, o.gelu == "tanh" ? nn::GeluForm::tanh : nn::GeluForm::erf, o.in);
    Generator gen(0);
    gpt_task::LoadedModel m{nn::GPT<float>(c, gen), std::nullopt, c.vocab_size};
    io::load_gpt_state_dict(m.model, arrays, o.in);
    return m;
}

// A Llama (a `train llama` checkpoint, a llama2.c .bin or a Llama folder) as llama2.c's files: `--to
// llama2c` a folder of model.bin and tokenizer.bin (run.c's two files; the tokenizer SentencePiece),
// *.bin the model alone; a folder in Hugging Face's layout; *.npz a `train llama` checkpoint (its
// tokenizer's files beside it).
int export_llama(const ExportOptions& o) {
    const std::string kind = out_kind(o);
    if (o.n_head_given || o.gelu_given)
        throw value_error(fmt::format("{}: --n_head and --gelu are for a nanoGPT state dict; this file records its model", o.in));
    if (kind == "llama2c" || kind == "folder") io::StagingDir::check_target(o.out);
    else io::require_parent_dir(o.out);
    llama_task::LoadedLlama m = llama_task::load_llama(o.in);
    gpt_task::use_tokenizer(m, o.tokenizer, o.in);
    const text::SentencePieceModel* sentencepiece = m.tokenizer ? m.tokenizer->sentencepiece_model() : nullptr;
    if (kind == "llama2c") {
        if (!sentencepiece)
            throw value_error(o.in + ": run.c's tokenizer.bin is a SentencePiece vocabulary and this model has " +
                              (m.tokenizer ? "another kind of tokenizer" : "none") +
                              ": give --tokenizer M (a tokenizer.model), or write the model alone to a .bin");
        if (sentencepiece->vocab_size() != m.model.config.vocab_size)
            throw value_error(fmt::format("{}: run.c reads as many tokens as the model's vocab_size {}; the tokenizer has {}",
                                          o.in, m.model.config.vocab_size, sentencepiece->vocab_size()));
        io::StagingDir staging(o.out);
        io::save_llama2c(m.model, staging.file("model.bin"));
        const std::string bin = sentencepiece->llama2c_tokenizer_bin();
        io::write_file_atomic(staging.file("tokenizer.bin"), bin.data(), bin.size());
        staging.commit();
    } else if (kind == "bin") {
        io::save_llama2c(m.model, o.out);
    } else if (kind == "folder") {
        if (!m.tokenizer)
            throw value_error(o.in + ": holds no tokenizer, which a model folder needs: give --tokenizer M (a tokenizer.model)");
        io::StagingDir staging(o.out);
        io::save_llama_folder(m.model, *m.tokenizer, staging.dir());
        staging.commit();
    } else {
        if (!m.tokenizer)
            throw value_error(o.in + ": holds no tokenizer, which a `train llama` checkpoint records: give --tokenizer M");
        if (const fs::path dir = fs::path(o.out).parent_path(); m.tokenizer->encodes_whole_texts())
            io::write_folder_tokenizer(dir.empty() ? "." : dir, *m.tokenizer);
        io::save_model_with_config(o.out, m.model, llama_task::checkpoint_config(m.model.config, *m.tokenizer));
    }
    const nn::LlamaConfig& c = m.model.config;
    fmt::print("{} -> {} ({}: {} layers, {} heads, {} key/value heads, dim {}, vocab {}{})\n", o.in, o.out, kind,
               c.n_layers, c.n_heads, c.kv_heads(), c.dim, c.vocab_size,
               m.tokenizer ? fmt::format(", {}-token tokenizer", m.tokenizer->vocab_size()) : std::string());
    return 0;
}

int export_model(const ExportOptions& o) {
    if (llama_task::is_llama(o.in)) return export_llama(o);
    const std::string kind = out_kind(o);
    if (kind == "llama2c") throw value_error(o.in + ": --to llama2c writes a Llama; this is a GPT");
    if (kind == "folder") io::StagingDir::check_target(o.out);
    else io::require_parent_dir(o.out);
    gpt_task::LoadedModel m = read_in(o);
    gpt_task::use_tokenizer(m, o.tokenizer, o.in);
    if (kind == "folder") {
        if (!m.tokenizer)
            throw value_error(o.in + ": holds no tokenizer, which a model folder needs: give --tokenizer M (a folder with "
                                     "GPT-2's vocab.json and merges.txt for an llm.c model)");
        io::StagingDir staging(o.out);
        io::save_gpt_folder(m.model, *m.tokenizer, staging.dir());
        staging.commit();
    } else if (kind == "bin") {
        io::save_llmc(m.model, o.out, m.usable_vocab);
    } else if (m.tokenizer && m.tokenizer->kind() != text::Tokenizer::Kind::bpe) {
        io::save_model_with_config(o.out, m.model, gpt_task::checkpoint_config(m.model.config, *m.tokenizer));
    } else {
        io::save_state_dict(m.model, o.out);  // a BPE tokenizer stays out of an .npz: its files are a folder's
    }
    fmt::print("{} -> {} ({}: {} layers, {} heads, n_embd {}, vocab {}{})\n", o.in, o.out, kind, m.model.config.n_layer,
               m.model.config.n_head, m.model.config.n_embd, m.model.config.vocab_size,
               m.tokenizer ? fmt::format(", {}-token tokenizer", m.tokenizer->vocab_size()) : std::string());
    return 0;
}

}  // namespace

void setup_export(CLI::App& cmd) {
    static ExportOptions o;
    cmd.add_option("IN", o.in,
                   "a `train gpt` or `train llama` checkpoint or a nanoGPT state dict (.npz), a model folder, or an "
                   "llm.c or llama2.c .bin")
        ->required()
        ->check(CLI::ExistingPath);
    cmd.add_option("OUT", o.out,
                   "a folder (config.json, model.safetensors, the tokenizer), an .npz, an llm.c or llama2.c .bin, or "
                   "with --to llama2c a folder of model.bin and tokenizer.bin")
        ->required();
    cmd.add_option("--to", o.to,
                   "OUT's kind when its name does not say it (default: from the name); llama2c: a folder of run.c's "
                   "model.bin and tokenizer.bin, from a Llama")
        ->check(CLI::IsMember({"folder", "npz", "bin", "llama2c"}));
    cmd.add_option("--tokenizer", o.tokenizer,
                   "the tokenizer to write with the model, from any model `xgrad tokenize --model` takes (default: IN's)")
        ->check(CLI::ExistingPath);
    cmd.add_option("--n_head", o.n_head, "a nanoGPT state dict: its attention heads")->check(at_least(1));
    cmd.add_option("--gelu", o.gelu, "a nanoGPT state dict: its GELU, erf (nanoGPT's nn.GELU) or tanh")
        ->check(CLI::IsMember({"erf", "tanh"}));
    cmd.callback([&cmd] {
        o.n_head_given = cmd.get_option("--n_head")->count() > 0;
        o.gelu_given = cmd.get_option("--gelu")->count() > 0;
        selected_action() = [] { return export_model(o); };
    });
}

}  // namespace xgrad::cli
