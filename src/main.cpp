// The `xgrad` command line tool.
#include <cstdio>
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
    CLI::App app{"xgrad: reverse-mode autodiff for attention in C++"};
    app.require_subcommand(1);
    xgrad::cli::add_gradcheck_command(app);
    xgrad::cli::add_train_mlp_command(app);
    xgrad::cli::add_attention_command(app);
    xgrad::cli::add_bench_command(app);
    xgrad::cli::add_heads_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);
        std::cerr << "xgrad: " << e.what() << '\n';
        return 2;
    }
    try {
        return xgrad::cli::run_selected();
    } catch (const std::exception& e) {
        std::cerr << "xgrad: " << e.what() << '\n';
        return 2;
    }
}
