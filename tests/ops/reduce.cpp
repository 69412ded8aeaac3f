// sum, mean, max: values, keepdims, axes, gradients by hand, errors (gradchecks: checks/reduce.cpp).
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_reduce {

using namespace xgrad;
using T2 = xt::xtensor<double, 2>;
using T3 = xt::xtensor<double, 3>;

TEST_CASE("reductions over all elements and over one axis") {
    auto x = constant(T2{{1, 5, 3}, {4, 2, 6}});
    CHECK(sum(x).value()() == 21);
    CHECK(mean(x).value()() == 3.5);
    CHECK(max(x).value()() == 6);
    CHECK(sum(x, 0).value() == xt::xtensor<double, 1>{5, 7, 9});
    CHECK(sum(x, -1).value() == xt::xtensor<double, 1>{9, 12});
    CHECK(mean(x, 1, keepdims).value() == T2{{3}, {4}});
    CHECK(max(x, 0).value() == xt::xtensor<double, 1>{4, 5, 6});
    CHECK(max(x, 1, keepdims).value() == T2{{5}, {6}});
    CHECK(sum(x, keepdims).value() == T2{{21}});
    CHECK(sum(x * 2.0, 0).value() == xt::xtensor<double, 1>{10, 14, 18});  // expressions are materialized
}

TEST_CASE("max sends the gradient to the winner; an all-reduce shares it among ties (as torch)") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T2{{1, 7, 7}, {9, 2, 9}});
    backward(sum(max(x, 1)));  // first winner per row
    CHECK(x.grad() == T2{{0, 1, 0}, {1, 0, 0}});
    x.zero_grad();
    backward(max(x));  // two elements equal 9
    CHECK(x.grad() == T2{{0, 0, 0}, {0.5, 0, 0.5}});
    auto row = parameter(T2{{7, 7, 1}});  // an axis reduction stays first-winner when the other extents are 1
    backward(sum(max(row, 1)));
    CHECK(row.grad() == T2{{1, 0, 0}});
}

TEST_CASE("max over an axis of an empty but not reduced-empty operand gives an empty result") {
    auto x = constant(T2(std::array<std::size_t, 2>{0, 3}));
    CHECK(max(x, 1).size() == 0);
    CHECK_THROWS_AS(max(x, 0), shape_error);
}

TEST_CASE("an axis out of range is a value_error naming the op") {
    auto x = constant(T3(std::array<std::size_t, 3>{2, 3, 4}));
    CHECK_THROWS_WITH_AS(sum(x, 3), "sum: axis 3 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_AS(mean(x, -4), value_error);
    auto empty = constant(T2(std::array<std::size_t, 2>{0, 3}));
    CHECK_THROWS_WITH_AS(max(empty), "max: cannot reduce over an empty axis of operand of shape (0, 3)", shape_error);
}

}  // namespace test_ops_reduce
