// gradcheck itself: it must catch wrong, missing and non-accumulating gradients.
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_check_gradcheck {

using namespace xgrad;

namespace {
// y = 3x, with a deliberately wrong / missing / overwriting backward (to test the checker).
enum class Bug { none, wrong, missing, overwrite };
template <Real T, std::size_t N>
class TripleNode final : public OpNode<TripleNode<T, N>, T, N> {
public:
    Var<T, N> x;
    Bug bug = Bug::none;
    const char* op_name() const override { return "triple"; }
    auto inputs() { return std::tie(x); }
    void forward() { this->value = 3.0 * x.value(); }
    void backward() override {
        auto& gx = x.node()->grad_buffer();
        if (bug == Bug::missing) return;
        if (bug == Bug::overwrite) gx = 3.0 * this->grad_buffer();
        else gx += (bug == Bug::wrong ? 3.1 : 3.0) * this->grad_buffer();
    }
};
template <std::size_t N>
Var<double, N> triple(const Var<double, N>& x, Bug bug) {
    return make_op<TripleNode<double, N>>(x.shape(), [&](auto& node) {
        node.bug = bug;
        node.forward();
    }, x);
}
}  // namespace

TEST_CASE("gradcheck passes a correct op in full and fast mode") {
    GradcheckOptions fast;
    fast.mode = GradcheckOptions::Mode::fast;
    auto x = randn<2>({4, 5});
    auto full = gradcheck([](auto& v) { return triple(v, Bug::none); }, x);
    CHECK(full.passed);
    CHECK(full.mode == "full");
    auto quick = gradcheck([](auto& v) { return triple(v, Bug::none); }, x, fast);
    CHECK(quick.passed);
    CHECK(quick.mode == "fast");
}

TEST_CASE("gradcheck reports the worst element of a wrong gradient") {
    auto r = gradcheck([](auto& v) { return triple(v, Bug::wrong); }, randn<1>({3}));
    CHECK_FALSE(r.passed);
    CHECK(r.analytic == doctest::Approx(3.1));
    CHECK(r.numeric == doctest::Approx(3.0));
    CHECK(r.max_abs_error == doctest::Approx(0.1));
    // y = 3x: every wrong entry is on the diagonal (input index i, output i), each off by 0.1
    bool names_a_diagonal_entry = false;
    for (int i = 0; i < 3; ++i)
        names_a_diagonal_entry = names_a_diagonal_entry || r.report().find("input 0 index (" + std::to_string(i) +
                                                                           ",) output " + std::to_string(i)) !=
                                                               std::string::npos;
    CHECK(names_a_diagonal_entry);
}

TEST_CASE("gradcheck fails an all-zero analytic gradient and a backward that does not accumulate") {
    auto missing = gradcheck([](auto& v) { return triple(v, Bug::missing); }, randn<1>({3}));
    CHECK_FALSE(missing.passed);
    GradcheckOptions no_compare;
    no_compare.atol = 1e9;  // even when the comparison is made lenient, the zero check remains
    auto zero = gradcheck([](auto& v) { return triple(v, Bug::missing); }, randn<1>({3}), no_compare);
    CHECK_FALSE(zero.passed);
    CHECK(zero.failure.find("all zero") != std::string::npos);
    auto overwrite = gradcheck([](auto& v) { return triple(v, Bug::overwrite); }, randn<1>({3}));
    CHECK_FALSE(overwrite.passed);
    CHECK(overwrite.failure.find("accumulate") != std::string::npos);
}

TEST_CASE("gradcheck in fast mode catches a wrong gradient on a large input") {
    GradcheckOptions fast;
    fast.mode = GradcheckOptions::Mode::fast;
    auto r = gradcheck([](auto& v) { return triple(v, Bug::wrong); }, randn<2>({40, 50}), fast);
    CHECK_FALSE(r.passed);
    CHECK(r.worst_where.find("projection") != std::string::npos);
}

TEST_CASE("the reported worst element is the one with the largest error") {
    // y = triple(x) * x with triple's wrong backward: dy/dx = 6.1x against the true 6x, so the
    // element x = 10 is furthest off.
    auto r = gradcheck([](auto& v) { return triple(v, Bug::wrong) * v; }, xt::xtensor<double, 1>{1, 10, 2});
    CHECK_FALSE(r.passed);
    CHECK(r.worst_where == "index (1,) output 1");
    CHECK(r.analytic == doctest::Approx(61));  // 3.1 x + 3 x at x = 10
    CHECK(r.numeric == doctest::Approx(60));
    CHECK(r.failure.find("index (1,)") != std::string::npos);
}

TEST_CASE("a passing check names an element whose error is the largest, not one with no error") {
    // y = x² at x = (0, 3): analytic 2x exact; the central difference at 3 has rounding error, at 0
    // none. The element named is x = 3, with the error the report gives as max abs error.
    auto r = gradcheck([](auto& v) { return v * v; }, xt::xtensor<double, 1>{0, 3});
    CHECK(r.passed);
    REQUIRE(r.max_abs_error > 0);
    CHECK(r.worst_where == "index (1,) output 1");
    CHECK(std::abs(r.analytic - r.numeric) == r.max_abs_error);
}

}  // namespace test_check_gradcheck
