// `xgrad gradcheck`: runs every registered op check, one row each, then "N passed, M failed".
#include <regex>
#include <string>

#include <fmt/core.h>

#include "checks/registry.hpp"
#include "commands.hpp"

namespace xgrad::cli {

void setup_gradcheck(CLI::App& cmd) {
    static std::string filter;
    static bool verbose = false;
    cmd.add_option("--filter", filter, "only ops whose name matches this regular expression (default: every op)");
    cmd.add_flag("-v,--verbose", verbose, "print the full report of every check");
    cmd.callback([] {
        selected_action() = [] {
            const std::regex re(filter.empty() ? ".*" : filter);
            int passed = 0, failed = 0;
            fmt::print("{:<24} {:<34} {:>12} {:>12}  {}\n", "op", "shapes", "max abs err", "max rel err", "result");
            for (const auto& c : checks::registry()) {
                if (!std::regex_search(c.op, re)) continue;
                GradcheckResult r;
                try {
                    r = c.run();
                } catch (const std::exception& e) {
                    r.passed = false;
                    r.failure = std::string("threw: ") + e.what();
                }
                (r.passed ? passed : failed)++;
                fmt::print("{:<24} {:<34} {:>12.3e} {:>12.3e}  {}\n", c.op, c.shapes, r.max_abs_error,
                           r.max_rel_error, r.passed ? "pass" : "FAIL");
                if (!r.passed || verbose) fmt::print("    {}\n", r.report());
            }
            fmt::print("{} passed, {} failed\n", passed, failed);
            return failed > 0 ? 1 : 0;
        };
    });
}

}  // namespace xgrad::cli
