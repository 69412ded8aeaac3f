// The checks `xgrad gradcheck` runs: each family file registers its cases at static-init time.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace xgrad::checks {

struct Case {
    std::string op;      // e.g. "matmul"
    std::string shapes;  // e.g. "(2,3)x(3,4)"
    std::function<GradcheckResult()> run;
};

inline std::vector<Case>& registry() {
    static std::vector<Case> cases;
    return cases;
}

// In a family file, named after it (unity builds compile several family files in one unit):
//   const Register registered_elementwise{{ {"exp", "(3,4)", [] { return gradcheck(...); }}, ... }};
struct Register {
    explicit Register(std::vector<Case> cases) {
        for (auto& c : cases) registry().push_back(std::move(c));
    }
};

}  // namespace xgrad::checks
