// `xgrad gradcheck`: runs every registered gradcheck case (include/xgrad/check/registry.hpp; xgrad's
// own in checks/), one row each, then "N passed, M failed"; --list names them without running.
//
// The registry is the tool's longest compile, so `xgrad` is linked without it and `xgrad-gradcheck`,
// the same tool with it, is built beside it (src/meson.build): `xgrad gradcheck` in a tool without
// cases runs `xgrad-gradcheck gradcheck ...` from its own folder, as git runs git-<command>.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "commands/commands.hpp"
#include "xgrad/check/registry.hpp"

namespace xgrad::cli {

namespace {

int list_checks(const std::vector<const GradcheckCase*>& cases) {
    fmt::print("{:<24} {:<34} {}\n", "op", "shapes", "family");
    for (const auto* c : cases) fmt::print("{:<24} {:<34} {}\n", c->op, c->variant, c->family);
    fmt::print("{} checks\n", cases.size());
    return 0;
}

int run_checks(const std::vector<const GradcheckCase*>& cases, bool verbose) {
    int passed = 0, failed = 0;
    fmt::print("{:<24} {:<34} {:>12} {:>12}  {}\n", "op", "shapes", "max abs err", "max rel err", "result");
    for (const auto* c : cases) {
        const GradcheckResult r = run_gradcheck(*c);
        (r.passed ? passed : failed)++;
        fmt::print("{:<24} {:<34} {:>12.3e} {:>12.3e}  {}\n", c->op, c->variant, r.max_abs_error, r.max_rel_error,
                   r.passed ? "pass" : "FAIL");
        if (!r.passed || verbose) fmt::print("    {}\n", r.report());
    }
    fmt::print("{} passed, {} failed\n", passed, failed);
    return failed > 0 ? 1 : 0;
}

// Replaces this process with xgrad-gradcheck from this program's folder, given `args`.
[[noreturn]] void run_with_registry(std::vector<std::string> args) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path sibling = fs::read_symlink("/proc/self/exe", ec).parent_path() / "xgrad-gradcheck";
    if (ec || !fs::is_regular_file(sibling))
        throw value_error("the gradcheck cases are in " + sibling.string() + ", which is not built: ninja -C build " +
                          "src/xgrad-gradcheck (./scripts/test builds it)");
    args.insert(args.begin(), {"xgrad-gradcheck", "gradcheck"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::cout.flush();
    execv(sibling.c_str(), argv.data());
    throw value_error("cannot run " + sibling.string() + ": " + std::strerror(errno));
}

}  // namespace

void setup_gradcheck(CLI::App& cmd) {
    static std::string filter;
    static bool verbose = false, list = false;
    cmd.add_option("--filter", filter, "only ops whose name matches this regular expression (default: every op)");
    cmd.add_flag("-v,--verbose", verbose, "print the full report of every check");
    cmd.add_flag("--list", list, "list the checks (op, shapes, family) without running them");
    cmd.callback([] {
        selected_action() = [] {
            if (gradcheck_registry().empty()) {
                std::vector<std::string> args;
                if (!filter.empty()) args.insert(args.end(), {"--filter", filter});
                if (verbose) args.push_back("--verbose");
                if (list) args.push_back("--list");
                run_with_registry(std::move(args));
            }
            // a malformed --filter is find_gradchecks's value_error: main prints it on one line, exit code 2
            const std::vector<const GradcheckCase*> cases = find_gradchecks(filter);
            return list ? list_checks(cases) : run_checks(cases, verbose);
        };
    });
}

}  // namespace xgrad::cli
