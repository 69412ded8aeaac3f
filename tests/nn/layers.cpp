// embedding op and the Embedding, LayerNorm, Dropout, PositionalEncoding modules (their gradchecks:
// checks/nn_layers.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "xgrad/nn/layers.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_nn_layers {

using namespace xgrad;

namespace {
using Idx1 = xt::xtensor<std::int64_t, 1>;
using Idx2 = xt::xtensor<std::int64_t, 2>;

// weight row r = (10r, 10r + 1, 10r + 2): every looked-up value names its row
xt::xtensor<double, 2> table(std::size_t rows) {
    xt::xtensor<double, 2> w = xt::xtensor<double, 2>::from_shape({rows, 3});
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t e = 0; e < 3; ++e) w(r, e) = 10.0 * double(r) + double(e);
    return w;
}
}  // namespace

// ---------------------------------------------------------------- embedding op

TEST_CASE("embedding: gathers rows for indices of rank 1 and 2") {
    auto w = parameter(table(5));
    auto y = embedding(w, Idx2{{4, 0}, {2, 4}});
    REQUIRE(y.shape() == std::array<std::size_t, 3>{2, 2, 3});
    CHECK(y.value()(0, 0, 0) == 40);
    CHECK(y.value()(0, 0, 2) == 42);
    CHECK(y.value()(0, 1, 1) == 1);
    CHECK(y.value()(1, 0, 2) == 22);
    CHECK(y.value()(1, 1, 0) == 40);
    auto z = embedding(w, Idx1{3});
    REQUIRE(z.shape() == std::array<std::size_t, 2>{1, 3});
    CHECK(z.value()(0, 1) == 31);
    auto empty = embedding(w, Idx1::from_shape({0}));
    CHECK(empty.shape() == std::array<std::size_t, 2>{0, 3});
}

TEST_CASE("embedding: backward scatter-adds; repeated indices accumulate; padding row gets nothing") {
    auto w = parameter(table(4));
    auto y = embedding(w, Idx2{{1, 3, 1}, {0, 1, 3}});
    // seed dY[i, j, e] = 100 i + 10 j + e
    xt::xtensor<double, 3> seed = xt::xtensor<double, 3>::from_shape({2, 3, 3});
    for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 3; ++j)
            for (std::size_t e = 0; e < 3; ++e) seed(i, j, e) = 100.0 * i + 10.0 * j + e;
    backward(y, seed);
    // row 1 is looked up at (0,0), (0,2), (1,1): 0 + 20 + 110 = 130 (+ 3e)
    for (std::size_t e = 0; e < 3; ++e) {
        CHECK(w.grad()(1, e) == 130 + 3.0 * e);
        CHECK(w.grad()(3, e) == 10 + 120 + 2.0 * e);  // (0,1), (1,2)
        CHECK(w.grad()(0, e) == 100 + 1.0 * e);       // (1,0)
        CHECK(w.grad()(2, e) == 0);                   // never looked up
    }
    w.zero_grad();
    auto yp = embedding(w, Idx2{{1, 3, 1}, {0, 1, 3}}, 1);
    backward(yp, seed);
    for (std::size_t e = 0; e < 3; ++e) {
        CHECK(w.grad()(1, e) == 0);  // padding_idx
        CHECK(w.grad()(3, e) == 130 + 2.0 * e);
    }
    CHECK(yp.value()(0, 0, 1) == 11);  // the padding row still reads its value, as torch
    w.zero_grad();
    backward(embedding(w, Idx1{3, 2}, -1), xt::xtensor<double, 2>(xt::ones<double>({2, 3})));  // -1 is row 3
    CHECK(w.grad()(3, 0) == 0);
    CHECK(w.grad()(2, 0) == 1);
}

TEST_CASE("embedding: errors name the bad index, its position and the table") {
    tape().clear();
    auto w = parameter(table(5));
    CHECK_THROWS_WITH_AS(embedding(w, Idx2{{0, 1}, {7, 2}}),
                         "embedding: index 7 at position (1, 0) of indices (2, 2) is out of range [0, 5) for weight (5, 3)",
                         value_error);
    CHECK_THROWS_AS(embedding(w, Idx1{-1}), value_error);
    CHECK_THROWS_AS(embedding(w, Idx1{5}), value_error);
    CHECK_THROWS_AS(embedding(w, Idx1{0}, 5), value_error);   // padding_idx out of range
    CHECK_THROWS_AS(embedding(w, Idx1{0}, -6), value_error);
    CHECK(tape().size() == 0);  // nothing recorded by the failed calls
}

// ---------------------------------------------------------------- modules

TEST_CASE("nn::Embedding: N(0, 1) init, zeroed padding row, lookup") {
    Generator gen(7);
    nn::Embedding<double> emb(50, 40, gen);
    CHECK(emb.num_embeddings() == 50);
    CHECK(emb.embedding_dim() == 40);
    const auto& w = emb.weight.value();
    const double mean = xt::mean(w)(), var = xt::variance(w)();
    CHECK(std::abs(mean) < 0.05);  // 2000 standard-normal draws: sd of the mean ≈ 0.022
    CHECK(std::abs(var - 1) < 0.1);
    nn::Embedding<double> padded(6, 3, gen, -2);
    REQUIRE(padded.padding_idx);
    CHECK(*padded.padding_idx == 4);
    for (std::size_t e = 0; e < 3; ++e) CHECK(padded.weight.value()(4, e) == 0);
    auto y = padded(Idx1{4, 1});
    CHECK(y.value()(0, 2) == 0);
    CHECK(y.value()(1, 2) == padded.weight.value()(1, 2));
    CHECK_THROWS_AS(nn::Embedding<double>(0, 3, gen), value_error);
    CHECK_THROWS_AS(nn::Embedding<double>(3, 3, gen, 3), value_error);
}

TEST_CASE("nn::LayerNorm: ones/zeros init, matches layer_norm, no-affine option") {
    nn::LayerNorm<double> ln(4);
    CHECK(ln.weight.value() == xt::xtensor<double, 1>{1, 1, 1, 1});
    CHECK(ln.bias.value() == xt::xtensor<double, 1>{0, 0, 0, 0});
    CHECK(ln.eps == 1e-5);
    auto x = constant(xt::xtensor<double, 2>{{1, 2, 3, 4}, {2, 2, 2, 6}});
    auto y = ln(x);
    // row (1, 2, 3, 4): mean 2.5, variance 1.25
    CHECK(y.value()(0, 0) == doctest::Approx(-1.5 / std::sqrt(1.25 + 1e-5)).epsilon(1e-12));
    CHECK(y.value()(1, 3) == doctest::Approx(3 / std::sqrt(3 + 1e-5)).epsilon(1e-12));
    nn::LayerNorm<double> plain(4, 1e-3, false);
    CHECK(!plain.weight);
    CHECK(parameter_count(plain) == 0);
    CHECK(plain(x).value()(0, 0) == doctest::Approx(-1.5 / std::sqrt(1.25 + 1e-3)).epsilon(1e-12));
    CHECK_THROWS_AS(ln(constant(xt::xtensor<double, 2>::from_shape({2, 3}))), shape_error);
    CHECK_THROWS_AS(nn::LayerNorm<double>(0), value_error);
}

TEST_CASE("nn::Dropout: training drops and rescales, eval is the identity, its own seeded generator") {
    nn::Dropout drop(0.5, 42);
    auto x = constant(xt::xtensor<double, 1>(xt::ones<double>({1000})));
    auto y = drop(x);
    std::size_t kept = 0;
    for (double v : y.value()) {
        CHECK((v == 0 || v == 2));
        kept += v == 2;
    }
    CHECK(kept > 430);  // Binomial(1000, 0.5): sd ≈ 16
    CHECK(kept < 570);
    set_training(drop, false);
    CHECK(!drop.training);
    CHECK(drop(x).value() == x.value());
    set_training(drop, true);
    CHECK(drop.training);

    Generator source(5), again(5);
    nn::Dropout a(0.3, source), b(0.3, again), c(0.3, source);
    auto ya = a(x), yb = b(x);
    CHECK(ya.value() == yb.value());  // seeded by the same draw: same mask
    CHECK(c(x).value() != ya.value());  // the next draw: another stream
    std::size_t dropped = 0;
    for (double v : ya.value()) dropped += v == 0;
    CHECK(dropped > 240);  // Binomial(1000, 0.3): sd ≈ 14.5
    CHECK(dropped < 360);
    CHECK_THROWS_AS(nn::Dropout(1.5, 1), value_error);
}

TEST_CASE("nn::PositionalEncoding: sinusoid table values, added to (B, T, d), dropout in training") {
    nn::PositionalEncoding<double> pe({.d_model = 4, .dropout = 0.0, .batch_first = true, .max_len = 10}, 1);
    REQUIRE(pe.table.shape() == std::array<std::size_t, 2>{10, 4});
    // P[pos, 2i] = sin(pos / 10000^(2i/4)), P[pos, 2i+1] = cos(same); 10000^(2/4) = 100
    CHECK(pe.table(0, 0) == 0);
    CHECK(pe.table(0, 1) == 1);
    CHECK(pe.table(1, 0) == doctest::Approx(std::sin(1.0)).epsilon(1e-15));
    CHECK(pe.table(1, 1) == doctest::Approx(std::cos(1.0)).epsilon(1e-15));
    CHECK(pe.table(1, 2) == doctest::Approx(std::sin(0.01)).epsilon(1e-15));
    CHECK(pe.table(3, 3) == doctest::Approx(std::cos(0.03)).epsilon(1e-15));
    CHECK(parameter_count(pe) == 0);

    xt::xtensor<double, 3> xv = xt::zeros<double>({2, 3, 4});
    xv(1, 2, 1) = 5;
    auto y = pe(constant(xv));
    REQUIRE(y.shape() == std::array<std::size_t, 3>{2, 3, 4});
    CHECK(y.value()(0, 2, 0) == doctest::Approx(std::sin(2.0)));
    CHECK(y.value()(1, 2, 0) == doctest::Approx(std::sin(2.0)));  // same table for every batch row
    CHECK(y.value()(1, 2, 1) == doctest::Approx(5 + std::cos(2.0)));

    nn::PositionalEncoding<double> odd({.d_model = 3, .dropout = 0.0, .max_len = 4}, 1);  // odd d: the last column is a sine
    CHECK(odd.table(2, 2) == doctest::Approx(std::sin(2 / std::pow(10000.0, 2.0 / 3))).epsilon(1e-15));

    nn::PositionalEncoding<double> dropping({.d_model = 4, .dropout = 0.5, .batch_first = true, .max_len = 10}, 3);
    auto yd = dropping(constant(xv));
    std::size_t zeros = 0;
    for (double v : yd.value()) zeros += v == 0;
    CHECK(zeros > 3);  // ~half of 24 (table(0, 0) = 0 already)
    set_training(dropping, false);
    CHECK(dropping(constant(xv)).value() == pe(constant(xv)).value());

    CHECK_THROWS_AS(pe(constant(xt::xtensor<double, 3>::from_shape({1, 11, 4}))), shape_error);  // T > max_len
    CHECK_THROWS_AS(pe(constant(xt::xtensor<double, 3>::from_shape({1, 2, 5}))), shape_error);   // d differs
    CHECK_THROWS_AS(nn::PositionalEncoding<double>({.d_model = 0}, 1), value_error);
}

}  // namespace test_nn_layers
