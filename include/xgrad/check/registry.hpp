// A registry of gradient checks, in the spirit of PyTorch's op_db: every case names an op, a variant
// (shapes, options) and the gradcheck that checks it. xgrad's own cases are walked by its unit
// tests and printed by `xgrad gradcheck`; register your own ops' checks the same way, at namespace
// scope in a .cpp file (they register during static initialization):
//
//   const xgrad::RegisterGradchecks registered_my_ops{"my_ops", {
//       {"softplus", "(3,4)", [] { return xgrad::gradcheck([](auto& x) { return softplus(x); },
//                                                          xgrad::randn<2>({3, 4})); }},
//   }};
//
//   for (const auto* c : xgrad::find_gradchecks("^softplus$")) std::cout << xgrad::run_gradcheck(*c).report();
//
// If that file is in a static library, link it whole (meson: link_whole) so the linker keeps it.
#pragma once
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/check/gradcheck.hpp"

namespace xgrad {

struct GradcheckCase {
    std::string op;       // the op or module checked, e.g. "matmul"
    std::string variant;  // shapes and options, e.g. "(2,3,4)x(4,2) folded"
    std::function<GradcheckResult()> run;
    std::string family = {};  // the group it was registered in, e.g. "linalg" (set by RegisterGradchecks)
};

// Every registered case, in registration order (within a family: as listed).
inline std::vector<GradcheckCase>& gradcheck_registry() {
    static std::vector<GradcheckCase> cases;
    return cases;
}

// Registers a family's cases; one object per family, named after it (unity builds may compile
// several family files in one unit).
struct RegisterGradchecks {
    RegisterGradchecks(const std::string& family, std::vector<GradcheckCase> cases) {
        for (auto& c : cases) {
            c.family = family;
            gradcheck_registry().push_back(std::move(c));
        }
    }
};

// The cases whose op name matches `op_regex` (a Perl-style regular expression found anywhere in the
// name, as std::regex_search finds one; empty matches all). A malformed pattern is a value_error.
std::vector<const GradcheckCase*> find_gradchecks(const std::string& op_regex = "");

// Runs one case; an exception it throws is a failed result whose failure says so.
inline GradcheckResult run_gradcheck(const GradcheckCase& c) {
    try {
        return c.run();
    } catch (const std::exception& e) {
        GradcheckResult r;
        r.passed = false;
        r.failure = std::string("threw: ") + e.what();
        return r;
    }
}

}  // namespace xgrad
