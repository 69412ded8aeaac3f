// The catalogue of bad inputs to the public ops: each must throw the named member of the
// xgrad::error family with a message naming the op, the operand and the shapes or values involved.
// Modules, attention, optimizers and schedules: bad_input_nn.cpp.
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_core_bad_input {

using namespace xgrad;

namespace {
using D1 = xt::xtensor<double, 1>;
using D2 = xt::xtensor<double, 2>;
using I1 = xt::xtensor<std::int64_t, 1>;
using I2 = xt::xtensor<std::int64_t, 2>;
using B2 = xt::xtensor<bool, 2>;
constexpr double NaN = std::numeric_limits<double>::quiet_NaN();

// A constant of ones with the given shape.
template <std::size_t N>
Var<double, N> ones(const std::array<std::size_t, N>& shape) {
    return constant(xt::xtensor<double, N>(shape, 1.0));
}
}  // namespace

static_assert(std::is_base_of_v<error, shape_error> && std::is_base_of_v<error, value_error> &&
              std::is_base_of_v<error, tape_error> && std::is_base_of_v<error, io_error>);

TEST_CASE("bad input: elementwise broadcasting and empty operands") {
    const auto a = ones<2>({2, 3});
    const auto c = ones<1>({4});
    CHECK_THROWS_WITH_AS(eval(a + c), "add: cannot broadcast operand of shape (2, 3) with operand of shape (4,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(eval(a * ones<2>({3, 2})),
                         "mul: cannot broadcast operand of shape (2, 3) with operand of shape (3, 2)", shape_error);
    // the left shape is the running broadcast of the operands so far, padded to the result's rank
    CHECK_THROWS_WITH_AS(eval(exp(a) / ones<3>({2, 2, 2})),
                         "div: cannot broadcast operand of shape (1, 2, 3) with operand of shape (2, 2, 2)",
                         shape_error);
    // an empty Var (default-constructed or moved from): before, a segfault
    const Var<double, 2> empty;
    CHECK_THROWS_WITH_AS(a - empty, "sub: right operand is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(empty * 2.0, "mul: left operand is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(tanh(empty), "tanh: operand is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(pow(empty, 2), "pow: operand is an empty Var (default-constructed or moved from)",
                         value_error);
}

TEST_CASE("bad input: sum, mean and max") {
    const auto x = ones<3>({2, 3, 4});
    CHECK_THROWS_WITH_AS(sum(x, 3), "sum: axis 3 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(mean(x, -4, keepdims), "mean: axis -4 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(max(x * 2.0, 5), "max: axis 5 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(max(ones<2>({2, 0}), 1),
                         "max: cannot reduce over an empty axis of operand of shape (2, 0)", shape_error);
    CHECK_THROWS_WITH_AS(max(ones<2>({0, 3})), "max: cannot reduce over an empty axis of operand of shape (0, 3)",
                         shape_error);
    CHECK_NOTHROW(max(ones<2>({0, 3}), 1));  // nothing to reduce over: an empty result
    CHECK_THROWS_WITH_AS(sum(Var<double, 2>{}), "sum: x is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(mean(Var<double, 2>{}, 0), "mean: x is an empty Var (default-constructed or moved from)",
                         value_error);
}

TEST_CASE("bad input: matmul and linear") {
    CHECK_THROWS_WITH_AS(matmul(ones<2>({2, 3}), ones<2>({4, 5})),
                         "matmul: inner dimensions differ: a (2, 3) and b (4, 5)", shape_error);
    CHECK_THROWS_WITH_AS(matmul(ones<3>({2, 3, 4}), ones<3>({3, 4, 5})),
                         "matmul: batch dimensions differ: a (2, 3, 4) and b (3, 4, 5)", shape_error);
    CHECK_THROWS_WITH_AS(matmul(ones<3>({2, 3, 4}), ones<2>({3, 5})),
                         "matmul: inner dimensions differ: a (2, 3, 4) and b (3, 5)", shape_error);
    CHECK_THROWS_WITH_AS(linear(ones<3>({2, 3, 4}), ones<2>({5, 3})),
                         "linear: weight has shape (5, 3) but x has shape (2, 3, 4): expected weight (out, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(linear(ones<2>({2, 4}), ones<2>({5, 4}), ones<1>({4})),
                         "linear: bias has shape (4,) but weight has shape (5, 4): expected bias (5,)", shape_error);
    // empty Vars: before, segfaults; an empty bias means no bias
    CHECK_THROWS_WITH_AS(matmul(Var<double, 2>{}, ones<2>({2, 3})),
                         "matmul: a is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(linear(ones<2>({2, 4}), Var<double, 2>{}),
                         "linear: weight is an empty Var (default-constructed or moved from)", value_error);
    CHECK(linear(ones<2>({2, 4}), ones<2>({5, 4}), Var<double, 1>{}).value() == D2({2, 5}, 4.0));
}

TEST_CASE("bad input: shape ops") {
    const auto x = ones<2>({2, 3});
    const auto x3 = ones<3>({2, 3, 6});
    CHECK_THROWS_WITH_AS(reshape(x, {-1, -1}), "reshape: only one dimension can be -1, got (-1, -1)", value_error);
    CHECK_THROWS_WITH_AS(reshape(x, {-2, 3}), "reshape: invalid dimension -2 in (-2, 3)", value_error);
    CHECK_THROWS_WITH_AS(reshape(x, {4, 2}),
                         "reshape: cannot reshape x of shape (2, 3) (6 elements) into (4, 2) (8 elements)",
                         shape_error);
    CHECK_THROWS_WITH_AS(reshape(x, {-1, 4}), "reshape: cannot reshape x of shape (2, 3) (6 elements) into (-1, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(reshape(x, {0, -1}), "reshape: cannot reshape x of shape (2, 3) (6 elements) into (0, -1)",
                         shape_error);
    CHECK_THROWS_WITH_AS(permute(x, {1, 1}), "permute: (1, 1) is not a permutation of the 2 axes of x (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(permute(x, {0, 2}), "permute: (0, 2) is not a permutation of the 2 axes of x (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(transpose(x, 0, 2), "transpose: axis 2 is out of range for x of shape (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(split_heads(x3, 0), "split_heads: num_heads must be positive", value_error);
    CHECK_THROWS_WITH_AS(split_heads(x3, 4),
                         "split_heads: the last dim of x (2, 3, 6) is not divisible by num_heads 4", shape_error);
    CHECK_THROWS_WITH_AS(split_heads<4>(x3, 5),
                         "split_heads: the last dim of x (2, 3, 6) is not divisible by num_heads 5", shape_error);
    CHECK_THROWS_WITH_AS(merge_heads(x3, 0), "merge_heads: num_heads must be positive", value_error);
    CHECK_THROWS_WITH_AS(merge_heads(x3, 3),
                         "merge_heads: the first dim of x (2, 3, 6) is not divisible by num_heads 3", shape_error);
    CHECK_THROWS_WITH_AS(concat(std::vector<Var<double, 2>>{}, 0), "concat: needs at least one input", value_error);
    CHECK_THROWS_WITH_AS(concat({x, ones<2>({2, 4})}, 0),
                         "concat: input 1 has shape (2, 4) but input 0 has shape (2, 3); all dims except axis 0 "
                         "must match",
                         shape_error);
    CHECK_THROWS_WITH_AS(concat({x, x}, -3), "concat: axis -3 is out of range for input 0 of shape (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(concat({x, Var<double, 2>{}}, 0),
                         "concat: input 1 is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(slice(x, 1, 3, 1), "slice: range [3, 1) is invalid for axis 1 of x (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(slice(x, 1, 0, 4), "slice: range [0, 4) is invalid for axis 1 of x (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(slice(x, 1, -4, 2), "slice: range [-4, 2) is invalid for axis 1 of x (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(slice(x, 2, 0, 1), "slice: axis 2 is out of range for x of shape (2, 3)", value_error);
    CHECK_THROWS_WITH_AS(narrow(x, 1, 2, 2), "narrow: start 2 and length 2 are out of range for axis 1 of x (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(narrow(x, 0, 0, -1), "narrow: start 0 and length -1 are out of range for axis 0 of x (2, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(expand(x, {2, 4}), "expand: cannot broadcast x of shape (2, 3) to (2, 4)", shape_error);
    CHECK_THROWS_WITH_AS(broadcast_to(x, {3, 3, 3}), "expand: cannot broadcast x of shape (2, 3) to (3, 3, 3)",
                         shape_error);
    CHECK_THROWS_WITH_AS(expand(ones<1>({1}), {std::size_t(1) << 62, 4}),
                         "expand: cannot broadcast x of shape (1,) to (4611686018427387904, 4): more elements than "
                         "size_t can count",
                         shape_error);
    // empty Vars: before, segfaults
    CHECK_THROWS_WITH_AS(reshape(Var<double, 2>{}, {6}),
                         "reshape: x is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(merge_heads(Var<double, 4>{}),
                         "merge_heads: x is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(narrow(Var<double, 2>{}, 0, 0, 1),
                         "narrow: x is an empty Var (default-constructed or moved from)", value_error);
}

TEST_CASE("bad input: softmax, log_softmax, masked_softmax and every mask type") {
    const auto x = ones<3>({2, 3, 4});
    CHECK_THROWS_WITH_AS(softmax(x, 3), "softmax: axis 3 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(log_softmax(x, -4), "log_softmax: axis -4 is out of range for x of shape (2, 3, 4)", value_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, ignore_mask(B2({3, 5}, false))),
                         "masked_softmax: ignore_mask of shape (3, 5) does not broadcast to the scores of shape "
                         "(2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, keep_mask(B2({2, 4}, true))),
                         "masked_softmax: keep_mask of shape (2, 4) does not broadcast to the scores of shape "
                         "(2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, causal, additive_mask(D1({3}, 0.0))),
                         "masked_softmax: additive_mask of shape (3,) does not broadcast to the scores of shape "
                         "(2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(I1{1, 2, 3})),
                         "masked_softmax: valid_lens of shape (3,) must equal the leading axes of the scores of "
                         "shape (2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(I2{{1, 2}, {3, 4}})),
                         "masked_softmax: valid_lens of shape (2, 2) must equal the leading axes of the scores of "
                         "shape (2, 3, 4)",
                         shape_error);
    CHECK_THROWS_WITH_AS(masked_softmax(x, valid_lens(I1{2, -1})),
                         "masked_softmax: valid_lens holds a negative length -1", value_error);
    CHECK_NOTHROW(masked_softmax(x, valid_lens(I1{9, 0})));  // as d2l: a length beyond S keeps every key
    CHECK_THROWS_WITH_AS(softmax(Var<double, 2>{}, 0), "softmax: x is an empty Var (default-constructed or moved from)",
                         value_error);
    CHECK_THROWS_WITH_AS(masked_softmax(Var<double, 2>{}, causal),
                         "masked_softmax: x is an empty Var (default-constructed or moved from)", value_error);
}

TEST_CASE("bad input: mse_loss and cross_entropy") {
    const auto x = ones<2>({2, 3});
    CHECK_THROWS_WITH_AS(mse_loss(x, ones<2>({3, 2})),
                         "mse_loss: input (2, 3) and target (3, 2) must have the same shape",
                         shape_error);
    CHECK_THROWS_WITH_AS(mse_loss(x, D2({2, 4}, 0.0), unreduced),
                         "mse_loss: input (2, 3) and target (2, 4) must have the same shape", shape_error);
    CHECK_THROWS_WITH_AS(mse_loss(Var<double, 2>{}, x),
                         "mse_loss: input is an empty Var (default-constructed or moved from)", value_error);
    CHECK_THROWS_WITH_AS(mse_loss(x, Var<double, 2>{}),
                         "mse_loss: target is an empty Var (default-constructed or moved from)", value_error);

    const auto z = ones<2>({3, 4});  // (N, C) = (3, 4)
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, 1}),
                         "cross_entropy: targets must have shape (3,) for logits (3, 4) (class axis 1 removed), "
                         "got (2,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(cross_entropy(ones<3>({2, 4, 3}), I2{{0, 1}, {1, 2}}),
                         "cross_entropy: targets must have shape (2, 3) for logits (2, 4, 3) (class axis 1 removed), "
                         "got (2, 2)",
                         shape_error);
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, 4, 1}),
                         "cross_entropy: target 4 at flat index 1 is out of range for 4 classes [0, 4) (ignore_index "
                         "is -100)",
                         value_error);
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, 1, -1}),
                         "cross_entropy: target -1 at flat index 2 is out of range for 4 classes [0, 4) (ignore_index "
                         "is -100)",
                         value_error);
    // a target equal to the default ignore_index is fine; with another ignore_index it is out of range
    CHECK_NOTHROW(cross_entropy(z, I1{0, -100, 1}));
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, -100, 1}, {.ignore_index = -1}),
                         "cross_entropy: target -100 at flat index 1 is out of range for 4 classes [0, 4) "
                         "(ignore_index is -1)",
                         value_error);
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, 1, 2}, unreduced, {.label_smoothing = 1.5}),
                         "cross_entropy: label_smoothing must be in [0, 1], got 1.500000", value_error);
    CHECK_THROWS_WITH_AS(cross_entropy(z, I1{0, 1, 2}, {.label_smoothing = NaN}),
                         "cross_entropy: label_smoothing must be in [0, 1], got nan", value_error);
    CHECK_THROWS_WITH_AS(cross_entropy(Var<double, 2>{}, I1{0}),
                         "cross_entropy: logits is an empty Var (default-constructed or moved from)", value_error);
}

TEST_CASE("bad input: dropout, layer_norm and embedding") {
    Generator gen;
    const auto x = ones<2>({2, 3});
    CHECK_THROWS_WITH_AS(dropout(x, -0.1, true, gen), "dropout: probability p must be in [0, 1], got -0.100000",
                         value_error);
    CHECK_THROWS_WITH_AS(dropout(x, 1.5, false, gen), "dropout: probability p must be in [0, 1], got 1.500000",
                         value_error);
    CHECK_THROWS_WITH_AS(dropout(x, NaN, true, gen), "dropout: probability p must be in [0, 1], got nan", value_error);
    CHECK_THROWS_WITH_AS(dropout(Var<double, 2>{}, 0.5, true, gen),
                         "dropout: x is an empty Var (default-constructed or moved from)", value_error);

    CHECK_THROWS_WITH_AS(layer_norm(x, ones<1>({4}), ones<1>({3})),
                         "layer_norm: weight must have shape (3,) to match the last axis of x (2, 3), got (4,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(layer_norm(x, ones<1>({3}), ones<1>({2})),
                         "layer_norm: bias must have shape (3,) to match the last axis of x (2, 3), got (2,)",
                         shape_error);
    CHECK_THROWS_WITH_AS(layer_norm(x, -1e-5), "layer_norm: eps must be >= 0, got -0.000010", value_error);
    CHECK_THROWS_WITH_AS(layer_norm(x, NaN), "layer_norm: eps must be >= 0, got nan", value_error);
    CHECK_THROWS_WITH_AS(layer_norm(Var<double, 2>{}),
                         "layer_norm: x is an empty Var (default-constructed or moved from)", value_error);

    const auto w = ones<2>({5, 3});
    CHECK_THROWS_WITH_AS(embedding(w, I2{{0, 1}, {7, 2}}),
                         "embedding: index 7 at position (1, 0) of indices (2, 2) is out of range [0, 5) for weight "
                         "(5, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(embedding(w, I1{0, -1}),
                         "embedding: index -1 at position (1,) of indices (2,) is out of range [0, 5) for weight "
                         "(5, 3)",
                         value_error);
    CHECK_THROWS_WITH_AS(embedding(w, I1{0}, 5), "embedding: padding_idx 5 is out of range for 5 embeddings",
                         value_error);
    CHECK_THROWS_WITH_AS(embedding(w, I1{0}, -6), "embedding: padding_idx -6 is out of range for 5 embeddings",
                         value_error);
    CHECK_THROWS_WITH_AS(embedding(Var<double, 2>{}, I1{0}),
                         "embedding: weight is an empty Var (default-constructed or moved from)", value_error);
}

}  // namespace test_core_bad_input
