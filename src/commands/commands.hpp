// The subcommands of the `xgrad` tool. main.cpp lists them with their one-line descriptions; each
// setup_* adds a command's options to its CLI::App and sets the action to run when it is parsed.
#pragma once
#include <functional>
#include <set>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/core.h>

namespace xgrad::cli {

void setup_train_copy(CLI::App& cmd);
void setup_train_sort(CLI::App& cmd);
void setup_train_mlp(CLI::App& cmd);
void setup_train_gpt(CLI::App& cmd);
void setup_train_llama(CLI::App& cmd);
void setup_sample(CLI::App& cmd);
void setup_tokenize(CLI::App& cmd);
void setup_export(CLI::App& cmd);
void setup_gpt(CLI::App& cmd);
void setup_llama(CLI::App& cmd);
void setup_patch(CLI::App& cmd);
void setup_heads(CLI::App& cmd);
void setup_explore(CLI::App& cmd);
void setup_inspect(CLI::App& cmd);
void setup_attention(CLI::App& cmd);
void setup_transformer(CLI::App& cmd);
void setup_gradcheck(CLI::App& cmd);
void setup_bench(CLI::App& cmd);

// The action of the subcommand that was parsed; returns the exit status.
std::function<int()>& selected_action();

// Commands that run data-parallel under mpirun (src/commands/distributed.hpp) add themselves in their
// setup_*; main() refuses any other command started by mpirun (its ranks would each do the whole
// job and write the same files).
std::set<const CLI::App*>& data_parallel_commands();

// Checks of numeric options with one-line messages ("--steps: must be >= 1, got -5"); the help
// shows the bound after the type ("INT:>=1").
inline CLI::Validator number_check(std::function<bool(double)> ok, const std::string& requirement,
                                   const std::string& help) {
    return CLI::Validator(
        [ok, requirement](std::string& text) -> std::string {
            double value = 0;
            if (!CLI::detail::lexical_cast(text, value)) return "must be a number, got " + text;
            return ok(value) ? std::string() : requirement + ", got " + text;
        },
        help);
}
inline CLI::Validator at_least(double min) {
    return number_check([min](double v) { return v >= min; }, fmt::format("must be >= {}", min), fmt::format(">={}", min));
}
inline CLI::Validator positive() {
    return number_check([](double v) { return v > 0; }, "must be > 0", ">0");
}
inline CLI::Validator between(double min, double max) {
    return number_check([=](double v) { return v >= min && v <= max; }, fmt::format("must be in [{}, {}]", min, max),
                        fmt::format("{}..{}", min, max));
}

}  // namespace xgrad::cli
