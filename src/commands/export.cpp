// `xgrad export IN OUT`: a GPT from one of the files xgrad reads into another. IN is a `train gpt`
// checkpoint (.npz with its config), a nanoGPT state dict (.npz without one: --n_head, --gelu), a model
// folder (config.json, model.safetensors, the tokenizer: io/gpt_folder.hpp) or an llm.c model (.bin).
// OUT is a folder, a .npz (nanoGPT's state dict; with the config and a byte or character tokenizer,
// which xgrad's commands read as a checkpoint) or a .bin (llm.c), by its name or --to. Everything is
// read and checked before anything is written: a folder appears whole (io::StagingDir), a file by a
// rename.
#include <filesystem>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "tasks/gpt.hpp"

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

int export_model(const ExportOptions& o) {
    const std::string kind = out_kind(o);
    if (kind == "folder") io::StagingDir::check_target(o.out);
    else io::require_parent_dir(o.out);
    gpt_task::LoadedModel m = read_in(o);
    if (!o.tokenizer.empty()) {
        m.tokenizer = gpt_task::tokenizer_of(o.tokenizer);
        if (m.tokenizer->vocab_size() > m.model.config.vocab_size)
            throw value_error(fmt::format("--tokenizer {}: {} tokens, more than {}'s vocab_size {}", o.tokenizer,
                                          m.tokenizer->vocab_size(), o.in, m.model.config.vocab_size));
        m.usable_vocab = m.tokenizer->vocab_size();
    }
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
    cmd.add_option("IN", o.in, "a `train gpt` checkpoint or nanoGPT state dict (.npz), a model folder, or an llm.c .bin")
        ->required()
        ->check(CLI::ExistingPath);
    cmd.add_option("OUT", o.out, "a folder (config.json, model.safetensors, the tokenizer), an .npz or an llm.c .bin")
        ->required();
    cmd.add_option("--to", o.to, "OUT's kind when its name does not say it (default: from the name)")
        ->check(CLI::IsMember({"folder", "npz", "bin"}));
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
