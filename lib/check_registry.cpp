// The gradcheck registry's search by op name: std::regex compiled here once, not in every unit that
// registers or runs cases (xgrad/check/registry.hpp).
#include <regex>

#include "xgrad/check/registry.hpp"

namespace xgrad {

std::vector<const GradcheckCase*> find_gradchecks(const std::string& op_regex) {
    const std::regex re(op_regex.empty() ? ".*" : op_regex);
    std::vector<const GradcheckCase*> found;
    for (const auto& c : gradcheck_registry())
        if (std::regex_search(c.op, re)) found.push_back(&c);
    return found;
}

}  // namespace xgrad
