// The `xgrad` command line tool: every command, with its one-line description.
#include <exception>
#include <iostream>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "commands/commands.hpp"
#include "xgrad/dist/context.hpp"

namespace xgrad::cli {

std::function<int()>& selected_action() {
    static std::function<int()> action;
    return action;
}

std::set<const CLI::App*>& data_parallel_commands() {
    static std::set<const CLI::App*> commands;
    return commands;
}

}  // namespace xgrad::cli

namespace {

// Help lines as "--steps INT:>=1 [1000]": the default in brackets, apart from the type and bound.
class Formatter : public CLI::Formatter {
    std::string make_option_opts(const CLI::Option* opt) const override {
        std::string text = CLI::Formatter::make_option_opts(opt);
        const std::string shown = "=" + opt->get_default_str();
        const std::size_t at = 1 + get_label(opt->get_type_name()).size();  // after " TYPE"
        if (opt->get_type_size() != 0 && !opt->get_default_str().empty() && text.compare(at, shown.size(), shown) == 0)
            text.replace(at, shown.size(), " [" + opt->get_default_str() + "]");
        return text;
    }
};

// "xgrad train copy": the command line's deepest parsed command.
const CLI::App* deepest(const CLI::App& app, std::string& path) {
    const CLI::App* sub = &app;
    path = app.get_name();
    while (!sub->get_subcommands().empty()) {
        sub = sub->get_subcommands().front();
        path += " " + sub->get_name();
    }
    return sub;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace xgrad::cli;
    CLI::App app{"xgrad: reverse-mode autodiff for attention in C++", "xgrad"};
    app.option_defaults()->always_capture_default();  // every --help shows every default
    app.formatter(std::make_shared<Formatter>());
    app.require_subcommand(1);

    CLI::App* train = app.add_subcommand("train", "train a model");
    train->require_subcommand(1);
    setup_train_copy(*train->add_subcommand("copy", "attention learns to copy a token sequence (Adam)"));
    setup_train_sort(*train->add_subcommand(
        "sort", "a Transformer encoder-decoder learns to sort digits (greedy decoding, exact match)"));
    setup_train_mlp(*train->add_subcommand("mlp", "a small MLP on a synthetic regression task (SGD)"));
    setup_train_gpt(*train->add_subcommand(
        "gpt", "a GPT learns a text (nanoGPT's recipe; default: the fortunes package), samples at each evaluation"));
    setup_train_llama(*train->add_subcommand(
        "llama", "a Llama learns a text (train gpt's recipe, llama2.c's model; a SentencePiece vocabulary learned from it)"));
    setup_sample(*app.add_subcommand("sample", "continue a prompt with a trained GPT or Llama, streaming tokens"));
    setup_tokenize(*app.add_subcommand(
        "tokenize", "text on standard input to token ids, or ids to text (--decode): GPT-2's BPE, SentencePiece or a checkpoint's"));
    setup_export(*app.add_subcommand(
        "export", "convert a GPT between a train gpt checkpoint, a nanoGPT .npz, a model folder and an llm.c .bin; a Llama to llama2.c's files"));
    setup_gpt(*app.add_subcommand("gpt", "run a GPT (nanoGPT's files) forward/backward on .npy files"));
    setup_llama(*app.add_subcommand("llama", "run a Llama (llama2.c's files) forward/backward on .npy files"));
    setup_patch(*app.add_subcommand(
        "patch", "activation and attribution patching, logit lens, direct logit attribution, integrated gradients of a GPT"));
    setup_heads(*app.add_subcommand(
        "heads", "label every attention head of a `train copy` or `train gpt` checkpoint, rank them by ablation"));
    setup_explore(*app.add_subcommand(
        "explore", "write a page of every attention's maps and gradients for one input (a checkpoint or a folder)"));
    setup_inspect(*app.add_subcommand(
        "inspect", "print the tape of one MultiheadAttention forward and backward: ops, names, shapes, gradients"));
    setup_attention(*app.add_subcommand(
        "attention", "run MultiheadAttention forward/backward (or Adam steps) on .npy files"));
    setup_transformer(*app.add_subcommand(
        "transformer", "run a Transformer layer, stack or model forward/backward on .npy files"));
    setup_gradcheck(*app.add_subcommand("gradcheck", "check every op's analytic gradient against finite differences"));
    setup_bench(*app.add_subcommand(
        "bench", "time one MultiheadAttention training step (the libtorch peer's workload)"));

    std::string where;
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);  // --help
        // A command that needs a subcommand and got none: its list of commands first.
        const CLI::App* cmd = deepest(app, where);
        if (cmd->get_require_subcommand_min() > 0 && cmd->get_subcommands().empty())
            std::cerr << cmd->help(cmd == &app ? "" : where.substr(0, where.rfind(' ')));  // "Usage: xgrad train ..."
        std::cerr << where << ": " << e.what() << '\n';
        return 2;
    }
    if (const CLI::App* cmd = deepest(app, where);
        xgrad::dist::launched_by_mpirun() && !data_parallel_commands().count(cmd)) {
        std::set<std::string> names;  // "xgrad train copy", sorted
        for (const CLI::App* dp : data_parallel_commands()) {
            std::string name;
            for (const CLI::App* a = dp; a; a = a->get_parent()) name = a->get_name() + (name.empty() ? "" : " " + name);
            names.insert(name);
        }
        std::string which;
        for (const auto& name : names) which += (which.empty() ? "" : ", ") + name;
        std::cerr << (where + ": does not run under mpirun (data-parallel commands: " + which + ")\n") << std::flush;
        return 2;
    }
    try {
        return selected_action() ? selected_action()() : 2;
    } catch (const std::exception& e) {
        // One line, named after the command that failed: "xgrad train copy: ..." ("... rank 1: ..."
        // under mpirun, where it then ends every rank), as dist::run ends a user's program.
        deepest(app, where);
        return xgrad::dist::report_failure(where, e, xgrad::dist::Context::current());
    }
}
