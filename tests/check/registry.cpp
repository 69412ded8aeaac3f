// The registered gradchecks (xgrad/check/registry.hpp; xgrad's own in checks/), walked case by
// case: one test case per family, one CHECK per case, named in the failure. Also: every family is
// walked here, and find_gradchecks / run_gradcheck. (That every public op and module has a case:
// tests/check_op_coverage.py.)
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>

#include <doctest/doctest.h>

#include "xgrad/check/registry.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_check_registry {

using namespace xgrad;

namespace {

// One per file in checks/; a new family needs its test case below.
const std::set<std::string> families{"elementwise", "reduce",    "linalg",    "shape",           "softmax",
                                     "loss",        "norm_dropout", "rotary",    "nn_layers", "attention",
                                     "attention_flags", "transformer", "gpt"};

// The family's cases, or every `parts`-th of them from the `part`-th (0-based): a family too slow for
// one test case under the sanitizers is walked by several, which meson runs as tests of their own.
void check_family(const std::string& family, std::size_t part = 0, std::size_t parts = 1) {
    std::size_t count = 0, index = 0;
    for (const auto& c : gradcheck_registry()) {
        if (c.family != family || index++ % parts != part) continue;
        ++count;
        const GradcheckResult r = run_gradcheck(c);
        INFO(c.op << " " << c.variant << ": " << r.report());
        CHECK(r.passed);
    }
    CHECK(count > 0);
}

}  // namespace

TEST_CASE("registered gradchecks: elementwise") { check_family("elementwise"); }
TEST_CASE("registered gradchecks: reduce") { check_family("reduce"); }
TEST_CASE("registered gradchecks: linalg") { check_family("linalg"); }
TEST_CASE("registered gradchecks: shape") { check_family("shape"); }
TEST_CASE("registered gradchecks: softmax") { check_family("softmax"); }
TEST_CASE("registered gradchecks: loss") { check_family("loss"); }
TEST_CASE("registered gradchecks: norm_dropout") { check_family("norm_dropout"); }
TEST_CASE("registered gradchecks: rotary") { check_family("rotary"); }
TEST_CASE("registered gradchecks: nn_layers") { check_family("nn_layers"); }
TEST_CASE("registered gradchecks: attention") { check_family("attention"); }
TEST_CASE("registered gradchecks: attention_flags 1/4") { check_family("attention_flags", 0, 4); }
TEST_CASE("registered gradchecks: attention_flags 2/4") { check_family("attention_flags", 1, 4); }
TEST_CASE("registered gradchecks: attention_flags 3/4") { check_family("attention_flags", 2, 4); }
TEST_CASE("registered gradchecks: attention_flags 4/4") { check_family("attention_flags", 3, 4); }
TEST_CASE("registered gradchecks: transformer") { check_family("transformer"); }
TEST_CASE("registered gradchecks: gpt") { check_family("gpt"); }

TEST_CASE("every registered family is walked by a test case above") {
    for (const auto& c : gradcheck_registry()) {
        INFO(c.op << " " << c.variant);
        CHECK(families.count(c.family) == 1);
    }
}

TEST_CASE("find_gradchecks selects by op name; run_gradcheck reports an exception as a failure") {
    CHECK(find_gradchecks().size() == gradcheck_registry().size());
    const auto matmuls = find_gradchecks("^matmul$");
    CHECK(matmuls.size() >= 2);
    for (const auto* c : matmuls) CHECK(c->op == "matmul");
    CHECK(find_gradchecks("^no such op$").empty());
    // found anywhere in the name, as std::regex_search finds: "soft" selects softmax and log_softmax
    const auto softmaxes = find_gradchecks("soft");
    CHECK(std::any_of(softmaxes.begin(), softmaxes.end(), [](const auto* c) { return c->op == "log_softmax"; }));
    for (const auto* c : softmaxes) CHECK(c->op.find("soft") != std::string::npos);
    CHECK_THROWS_WITH_AS(find_gradchecks("(matmul"),
                         "find_gradchecks: '(matmul' is not a valid regular expression: missing closing parenthesis "
                         "at offset 7",
                         value_error);

    const GradcheckCase throws{"broken", "()", []() -> GradcheckResult { throw std::runtime_error("no backward"); }};
    const GradcheckResult r = run_gradcheck(throws);
    CHECK_FALSE(r.passed);
    CHECK(r.failure == "threw: no backward");
}

}  // namespace test_check_registry
