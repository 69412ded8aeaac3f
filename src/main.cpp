// The `xgrad` command line tool.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

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
    xgrad::cli::add_inspect_command(app);
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
        // One line, named after the command that failed: "xgrad train copy: ..."
        std::string where = "xgrad", message = e.what();
        for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
            sub = sub->get_subcommands().front();
            where += " " + sub->get_name();
        }
        for (char& c : message)
            if (c == '\n') c = ' ';
        std::cerr << where << ": " << message << '\n';
        return 2;
    }
}
