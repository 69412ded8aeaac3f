// `xgrad inspect --from IN [--dot FILE] [--dump DIR]`: the tape of one MultiheadAttention forward
// and backward on the problem in IN (the folder format of `xgrad attention`). The work is in
// study/inspect.hpp; errors reach main (one line, exit status 2) before anything is written.
#include <iostream>
#include <optional>
#include <string>

#include "commands/commands.hpp"
#include "study/inspect.hpp"

namespace xgrad::cli {

void setup_inspect(CLI::App& cmd) {
    static std::string from, dot, dump;
    cmd.add_option("--from", from, "input folder, as for `xgrad attention`: config.json, query/key/value/grad_output.npy, "
                                   "parameters, optional masks")
        ->required();
    cmd.add_option("--dot", dot, "write the graph as Graphviz dot to FILE (render: dot -Tpng FILE -o graph.png; default: none)");
    cmd.add_option("--dump", dump, "write every value and gradient as .npy into folder DIR, named after its node (default: none)");
    cmd.callback([] {
        selected_action() = [] {
            InspectOptions opt;
            if (!dot.empty()) opt.dot = dot;
            if (!dump.empty()) opt.dump = dump;
            run_inspect(from, std::cout, opt);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
