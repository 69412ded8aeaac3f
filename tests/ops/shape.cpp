// Shape ops: hand-computed values, round trips, hand-computed gradients, errors (gradchecks:
// checks/shape.cpp).
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_shape {

using namespace xgrad;

namespace {
using D1 = xt::xtensor<double, 1>;
using D2 = xt::xtensor<double, 2>;
using D3 = xt::xtensor<double, 3>;
using D4 = xt::xtensor<double, 4>;
}  // namespace

TEST_CASE("reshape keeps row-major order and infers one -1") {
    auto x = constant(D2{{0, 1, 2}, {3, 4, 5}});
    CHECK(reshape<3>(x, {3, -1, 1}).value() == D3{{{0}, {1}}, {{2}, {3}}, {{4}, {5}}});
    CHECK(reshape(x, {6}).value() == D1{0, 1, 2, 3, 4, 5});
    CHECK(reshape(x, std::array<long, 2>{-1, 2}).value() == D2{{0, 1}, {2, 3}, {4, 5}});
    CHECK(reshape<2>(x * 2.0, {3, 2}).value() == D2{{0, 2}, {4, 6}, {8, 10}});
    auto xf = constant(xt::xtensor<float, 1>{1.f, 2.f, 3.f, 4.f});
    CHECK(reshape(xf, {2, 2}).value() == xt::xtensor<float, 2>{{1.f, 2.f}, {3.f, 4.f}});
}

TEST_CASE("reshape errors name both shapes") {
    auto x = constant(D2{{0, 1, 2}, {3, 4, 5}});
    CHECK_THROWS_AS(reshape(x, {-1, -1}), value_error);
    CHECK_THROWS_AS(reshape(x, {-2, 3}), value_error);
    CHECK_THROWS_AS(reshape(x, {4, -1}), shape_error);
    CHECK_THROWS_WITH_AS(reshape(x, {4, 2}), "reshape: cannot reshape x of shape (2, 3) (6 elements) into (4, 2) (8 elements)",
                         shape_error);
}

TEST_CASE("permute and transpose move axes (values by hand)") {
    auto x = constant(D3{{{0, 1, 2}}, {{3, 4, 5}}});  // (2, 1, 3)
    auto p = permute(x, {2, 0, 1});                    // (3, 2, 1): p[k, i, 0] = x[i, 0, k]
    CHECK(p.value() == D3{{{0}, {3}}, {{1}, {4}}, {{2}, {5}}});
    CHECK(std::string(p.op_name()) == "permute");
    auto m = constant(D2{{0, 1, 2}, {3, 4, 5}});
    CHECK(transpose(m, 0, 1).value() == D2{{0, 3}, {1, 4}, {2, 5}});
    auto c = constant(D3{{{0, 1}, {2, 3}}, {{4, 5}, {6, 7}}});
    CHECK(transpose(c, 0, -1).value() == D3{{{0, 4}, {2, 6}}, {{1, 5}, {3, 7}}});
    CHECK(transpose(c, 1, 1).value() == c.value());
    CHECK(transpose(m + 1.0, 1, 0).value() == D2{{1, 4}, {2, 5}, {3, 6}});
}

TEST_CASE("permute then its inverse is the identity") {
    auto x = constant(randn<4>({2, 3, 4, 5}, 3));
    const std::array<std::size_t, 4> order{2, 0, 3, 1}, inverse{1, 3, 0, 2};
    auto y = permute(x, order);
    CHECK(y.shape() == std::array<std::size_t, 4>{4, 2, 5, 3});
    CHECK(permute(y, inverse).value() == x.value());
    CHECK(transpose(transpose(x, 1, -1), 1, -1).value() == x.value());
}

TEST_CASE("permute and transpose errors") {
    auto x = constant(D3(std::array<std::size_t, 3>{2, 3, 4}));
    CHECK_THROWS_AS(permute(x, {0, 0, 1}), value_error);
    CHECK_THROWS_AS(permute(x, {0, 1, 3}), value_error);
    CHECK_THROWS_AS(transpose(x, 0, 3), value_error);
    CHECK_THROWS_AS(transpose(x, -4, 0), value_error);
}

TEST_CASE("the gradient of a transpose is the transposed seed (by hand)") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(D2{{0, 1, 2}, {3, 4, 5}});
    backward(transpose(x, 0, 1), D2{{1, 2}, {3, 4}, {5, 6}});
    CHECK(x.grad() == D2{{1, 3, 5}, {2, 4, 6}});
}

TEST_CASE("split_heads / merge_heads follow d2l's transpose_qkv / transpose_output") {
    auto x = constant(D3{{{0, 1, 2, 3}, {4, 5, 6, 7}}});  // B=1, T=2, H=2, D=2
    CHECK(split_heads(x, 2).value() == D3{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}});
    CHECK(split_heads<4>(x, 2).value() == D4{{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}});
    auto b2 = constant(D3{{{0, 1, 2, 3}}, {{4, 5, 6, 7}}});  // B=2, T=1: rows are b·H + h
    CHECK(split_heads(b2, 2).value() == D3{{{0, 1}}, {{2, 3}}, {{4, 5}}, {{6, 7}}});
    auto heads = constant(D3{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}});
    CHECK(merge_heads(heads, 2).value() == x.value());
    CHECK(merge_heads(constant(D4{{{{0, 1}, {4, 5}}, {{2, 3}, {6, 7}}}})).value() == x.value());
}

TEST_CASE("merge_heads undoes split_heads; split_heads equals reshape + permute + reshape") {
    auto x = constant(randn<3>({2, 3, 6}, 5));
    for (std::size_t h : {1, 2, 3, 6}) {
        CHECK(merge_heads(split_heads(x, h), h).value() == x.value());
        CHECK(merge_heads(split_heads<4>(x, h)).value() == x.value());
        const long H = long(h), D = 6 / H;
        auto composed = reshape<3>(permute(reshape<4>(x, {2, 3, H, D}), {0, 2, 1, 3}), {2 * H, 3, D});
        CHECK(split_heads(x, h).value() == composed.value());
    }
}

TEST_CASE("head split/merge errors") {
    auto x = constant(D3(std::array<std::size_t, 3>{1, 2, 4}));
    CHECK_THROWS_AS(split_heads(x, 3), shape_error);
    CHECK_THROWS_AS(split_heads<4>(x, 3), shape_error);
    CHECK_THROWS_AS(split_heads(x, 0), value_error);
    auto y = constant(D3(std::array<std::size_t, 3>{3, 2, 2}));
    CHECK_THROWS_WITH_AS(merge_heads(y, 2), "merge_heads: the first dim of x (3, 2, 2) is not divisible by num_heads 2",
                         shape_error);
}

TEST_CASE("concat joins along an axis (values by hand)") {
    auto a = constant(D2{{0, 1}, {2, 3}});
    auto b = constant(D2{{4}, {5}});
    auto c = constant(D2{{6, 7}});
    CHECK(concat({a, b}, 1).value() == D2{{0, 1, 4}, {2, 3, 5}});
    CHECK(concat({a, b, b}, -1).value() == D2{{0, 1, 4, 4}, {2, 3, 5, 5}});
    CHECK(concat(std::vector{a, c}, 0).value() == D2{{0, 1}, {2, 3}, {6, 7}});
    CHECK(concat({a}, 0).value() == a.value());
    auto e = constant(D2(std::array<std::size_t, 2>{0, 2}));
    CHECK(concat({e, c, e}, 0).value() == c.value());
}

TEST_CASE("concat errors and gradient routing") {
    auto a = constant(D2{{0, 1}, {2, 3}});
    auto c = constant(D2{{6, 7}});
    CHECK_THROWS_WITH_AS(concat({a, c}, 1),
                         "concat: input 1 has shape (1, 2) but input 0 has shape (2, 2); all dims except axis 1 must match",
                         shape_error);
    CHECK_THROWS_AS(concat(std::vector<Var<double, 2>>{}, 0), value_error);
    CHECK_THROWS_AS(concat({a, a}, 2), value_error);
    Tape t;
    TapeScope scope(t);
    auto p = parameter(D2{{1}, {2}});
    backward(concat({a, p, p}, 1), D2{{1, 2, 3, 4}, {5, 6, 7, 8}});  // p used twice: both columns add
    CHECK(p.grad() == D2{{7}, {15}});
}

TEST_CASE("slice and narrow (values by hand)") {
    auto x = constant(D2{{0, 1, 2, 3, 4}, {5, 6, 7, 8, 9}});
    CHECK(slice(x, 1, 1, 3).value() == D2{{1, 2}, {6, 7}});
    CHECK(slice(x, -1, -2, 5).value() == D2{{3, 4}, {8, 9}});
    CHECK(slice(x, 0, 1, 2).value() == D2{{5, 6, 7, 8, 9}});
    CHECK(slice(x, 1, 0, -1).value() == D2{{0, 1, 2, 3}, {5, 6, 7, 8}});
    CHECK(slice(x, 1, 2, 2).shape() == std::array<std::size_t, 2>{2, 0});
    CHECK(narrow(x, 1, 1, 3).value() == D2{{1, 2, 3}, {6, 7, 8}});
    CHECK(narrow(x, 1, -2, 2).value() == D2{{3, 4}, {8, 9}});
    CHECK(narrow(x * 1.0, 0, 0, 1).value() == D2{{0, 1, 2, 3, 4}});
}

TEST_CASE("slice and narrow errors") {
    auto x = constant(D2(std::array<std::size_t, 2>{2, 5}));
    CHECK_THROWS_AS(slice(x, 1, 3, 1), value_error);
    CHECK_THROWS_AS(slice(x, 1, 0, 6), value_error);
    CHECK_THROWS_AS(slice(x, 1, -6, 2), value_error);
    CHECK_THROWS_AS(slice(x, 2, 0, 1), value_error);
    CHECK_THROWS_AS(narrow(x, 1, 4, 2), value_error);
    CHECK_THROWS_AS(narrow(x, 1, 0, -1), value_error);
    CHECK_THROWS_AS(narrow(x, 0, -3, 1), value_error);
}

TEST_CASE("slices of one parameter accumulate into its gradient") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(D1{1, 2, 3, 4});
    backward(sum(slice(x, 0, 0, 3) * slice(x, 0, 1, 4)));  // x0 x1 + x1 x2 + x2 x3
    CHECK(x.grad() == D1{2, 4, 6, 3});
}

TEST_CASE("expand broadcasts by numpy rules; its gradient sums the repeats (by hand)") {
    auto x = constant(D2{{1}, {2}, {3}});
    CHECK(expand<3>(x, {2, 3, 2}).value() == D3{{{1, 1}, {2, 2}, {3, 3}}, {{1, 1}, {2, 2}, {3, 3}}});
    CHECK(broadcast_to(constant(D1{4, 5}), {2, 2}).value() == D2{{4, 5}, {4, 5}});
    CHECK(expand(x, {3, 1}).value() == x.value());
    CHECK_THROWS_WITH_AS(expand(x, {2, 2}), "expand: cannot broadcast x of shape (3, 1) to (2, 2)", shape_error);
    CHECK_THROWS_AS(expand(x, {4, 2, 2}), shape_error);
    Tape t;
    TapeScope scope(t);
    auto p = parameter(D2{{1, 2}});
    backward(expand(p, {3, 2}), D2{{1, 2}, {3, 4}, {5, 6}});
    CHECK(p.grad() == D2{{9, 12}});
    auto q = parameter(D2{{1}, {2}, {3}});
    backward(sum(expand<3>(q, {2, 3, 2})));
    CHECK(q.grad() == D2{{4}, {4}, {4}});
}

TEST_CASE("shape nodes reuse tape slots across steps with changing shapes") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(D2{{0, 1, 2, 3}, {4, 5, 6, 7}});
    for (long stop : {2, 4, 1}) {
        auto y = slice(x, 1, 0, stop);
        CHECK(y.shape(1) == std::size_t(stop));
        x.zero_grad();
        backward(sum(y));
        CHECK(sum(constant(x.grad())).value()() == doctest::Approx(2.0 * double(stop)));
        CHECK(y.value()(1, stop - 1) == 4 + stop - 1);
        t.clear();
    }
}

TEST_CASE("reshape and expand reject shapes whose element count overflows size_t") {
    auto x = constant(D1{1, 2, 3, 4});
    // 4 · (2^62 + 1) wraps to 4 = x.size(): must not be accepted
    CHECK_THROWS_WITH_AS(reshape(x, {4L, 4611686018427387905L}),
                         "reshape: target shape (4, 4611686018427387905) for x of shape (4,) has more elements than "
                         "size_t can count",
                         shape_error);
    CHECK_THROWS_AS(reshape(x, {-1L, 4611686018427387904L, 8L}), shape_error);
    // as numpy: even with zero elements, the nonzero extents must fit (xtensor's strides are signed)
    CHECK_THROWS_AS(reshape(constant(D1{}), {0L, 4611686018427387904L, 8L}), shape_error);
    CHECK(reshape(constant(D1{}), {0L, 1024L, 8L}).size() == 0);
    auto one = constant(D1{1.0});
    // 2^32 · 2^32 wraps to 0
    CHECK_THROWS_WITH_AS(expand(one, {4294967296ul, 4294967296ul}),
                         "expand: cannot broadcast x of shape (1,) to (4294967296, 4294967296): more elements than "
                         "size_t can count",
                         shape_error);
    CHECK_THROWS_AS(expand(one, {3ul, 6148914691236517206ul, 1ul}), shape_error);
    CHECK_THROWS_AS(expand(one, {0ul, 4294967296ul, 4294967296ul}), shape_error);  // strides would overflow
    CHECK(expand(one, {0ul, 1024ul, 1024ul}).size() == 0);
}

TEST_CASE("narrow with a huge length is an error, not an overflow") {
    auto x = constant(D1{1, 2, 3});
    CHECK_THROWS_WITH_AS(narrow(x, 0, 1, std::numeric_limits<long>::max()),
                         "narrow: start 1 and length 9223372036854775807 are out of range for axis 0 of x (3,)",
                         value_error);
    CHECK_THROWS_AS(narrow(x, 0, -1, std::numeric_limits<long>::max()), value_error);
    CHECK(narrow(x, 0, 1, 2).value() == D1{2, 3});
}

TEST_CASE("contiguous_strides rejects a rank above 16 before writing") {
    CHECK_THROWS_AS(detail::contiguous_strides(std::vector<std::size_t>(17, 1)), value_error);
    CHECK(detail::contiguous_strides(std::vector<std::size_t>(16, 2))[0] == 32768);
}

TEST_CASE("a shape op whose output needs no grad holds no reference to its input") {
    auto x = constant(D2{{0, 1, 2}, {3, 4, 5}});
    auto p = parameter(D2{{0, 1, 2}, {3, 4, 5}});
    auto r = reshape(x, {3, 2});
    auto t = transpose(x, 0, 1);
    auto c = concat({x, x}, 0);
    CHECK(x.node_ptr().use_count() == 1);
    {
        NoGrad ng;
        auto s = slice(p, 1, 0, 2);
        auto c2 = concat({p, x}, 1);
        CHECK(p.node_ptr().use_count() == 1);
        CHECK(s.value() == D2{{0, 1}, {3, 4}});
        CHECK(c2.value() == D2{{0, 1, 2, 0, 1, 2}, {3, 4, 5, 3, 4, 5}});
    }
    CHECK(r.value() == D2{{0, 1}, {2, 3}, {4, 5}});
    CHECK(t.value() == D2{{0, 3}, {1, 4}, {2, 5}});
    CHECK(c.value() == D2{{0, 1, 2}, {3, 4, 5}, {0, 1, 2}, {3, 4, 5}});
    // with grad the inputs are held (backward needs them) and gradients still flow
    auto c3 = concat({p, x}, 0);
    CHECK(p.node_ptr().use_count() == 2);
    backward(sum(c3 * c3));
    CHECK(p.grad() == D2{{0, 2, 4}, {6, 8, 10}});
    tape().clear();
}

}  // namespace test_ops_shape
