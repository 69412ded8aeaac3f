// `xgrad inspect --from IN [--dot FILE] [--dump DIR]`: the tape of one MultiheadAttention forward
// and backward on the problem in IN (the folder format of `xgrad attention`). The work is in
// xgrad/io/inspect_tool.hpp; errors reach main (one line, exit status 2) before anything is written.
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "xgrad/io/inspect_tool.hpp"

namespace xgrad::cli {

void add_inspect_command(CLI::App& app) {
    auto* cmd = app.add_subcommand(
        "inspect", "print the tape of one MultiheadAttention forward and backward: ops, names, shapes, gradients");
    static std::string from, dot, dump;
    cmd->add_option("--from", from, "input folder, as for `xgrad attention`: config.json, query/key/value/grad_output.npy, "
                                    "parameters, optional masks")
        ->required();
    cmd->add_option("--dot", dot, "write the graph as Graphviz dot to FILE (render: dot -Tpng FILE -o graph.png)");
    cmd->add_option("--dump", dump, "write every value and gradient as .npy into folder DIR, named after its node");
    cmd->callback([] {
        selected_action() = [] {
            io::InspectOptions opt;
            if (!dot.empty()) opt.dot = dot;
            if (!dump.empty()) opt.dump = dump;
            io::run_inspect(from, std::cout, opt);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
