// Subcommands of the `xgrad` tool. Each add_* registers options and the action to run.
#pragma once
#include <functional>

#include <CLI/CLI.hpp>

namespace xgrad::cli {

void add_gradcheck_command(CLI::App& app);
void add_train_mlp_command(CLI::App& app);
void add_attention_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_heads_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_train_copy_command(CLI::App& train);  // under `train`

// The action of the subcommand that was parsed; returns the exit status.
std::function<int()>& selected_action();
inline int run_selected() { return selected_action() ? selected_action()() : 2; }

}  // namespace xgrad::cli
