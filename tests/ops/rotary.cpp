// rotary_embedding and rotary_tables against llama2.c's precompute_freqs_cis and apply_rotary_emb
// (float32, interleaved pairs) and Hugging Face's rotate_half form (float64, halves), made by
// tests/fixtures/make_rotary.py; its errors. Gradchecks: checks/rotary.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "support/fixtures.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_rotary {

using namespace xgrad;

namespace {
using testing::max_abs_diff;
const testing::Fixtures fixtures{"rotary"};
}  // namespace

TEST_CASE("rotary_tables<float> are llama2.c's float32 tables") {
    const auto tables = rotary_tables<float>(8, 16);
    CHECK(tables.positions() == 16);
    CHECK(tables.head_dim() == 8);
    // the same float32 steps; the libraries' pow, cos and sin may differ in the last bit
    CHECK(max_abs_diff(tables.cos, fixtures.get<2>("cos")) < 2e-6);
    CHECK(max_abs_diff(tables.sin, fixtures.get<2>("sin")) < 2e-6);
    CHECK(tables.cos(0, 3) == 1.0f);
    CHECK(tables.sin(1, 0) == std::sin(1.0f));
}

TEST_CASE("rotary_embedding, interleaved: llama2.c's apply_rotary_emb in float32, values and gradients") {
    const auto tables = rotary_tables<float>(8, 16);
    auto q = parameter(xt::xtensor<float, 4>(fixtures.get<4>("q")));
    auto k = parameter(xt::xtensor<float, 4>(fixtures.get<4>("k")));
    auto yq = rotary_embedding(q, tables);
    auto yk = rotary_embedding(k, tables, 7);  // positions 7 to 11: a cache of 7 before them
    CHECK(max_abs_diff(yq.value(), fixtures.get<4>("yq")) < 1e-5);
    CHECK(max_abs_diff(yk.value(), fixtures.get<4>("yk")) < 1e-5);
    backward(yq, xt::xtensor<float, 4>(fixtures.get<4>("gq")));
    backward(yk, xt::xtensor<float, 4>(fixtures.get<4>("gk")));
    CHECK(max_abs_diff(q.grad(), fixtures.get<4>("dq")) < 1e-5);
    CHECK(max_abs_diff(k.grad(), fixtures.get<4>("dk")) < 1e-5);
    // a rotation: each pair keeps its length
    const auto& x = q.value();
    const auto& y = yq.value();
    for (std::size_t i = 0; i < 8; i += 2)
        CHECK(std::hypot(y(1, 4, 2, i), y(1, 4, 2, i + 1)) ==
              doctest::Approx(std::hypot(x(1, 4, 2, i), x(1, 4, 2, i + 1))).epsilon(1e-6));
}

TEST_CASE("rotary_embedding, halves: Hugging Face's rotate_half in float64, theta 500000, from position 3") {
    const auto tables = rotary_tables<double>(8, 16, 500000.0);
    auto x = parameter(fixtures.get<4>("halves_x"));
    auto y = rotary_embedding(x, tables, 3, RotaryStyle::halves);
    CHECK(max_abs_diff(y.value(), fixtures.get<4>("halves_y")) < 1e-12);
    backward(y, fixtures.get<4>("halves_g"));
    CHECK(max_abs_diff(x.grad(), fixtures.get<4>("halves_dx")) < 1e-12);
    CHECK(std::string(y.node()->op_name()) == "rotary_embedding");
}

TEST_CASE("rotary_embedding and rotary_tables errors name the operand and the shapes") {
    const auto tables = rotary_tables<double>(4, 6);
    auto x = parameter(randn<4>({1, 3, 2, 6}));
    CHECK_THROWS_WITH(rotary_embedding(x, tables),
                      "rotary_embedding: x (1, 3, 2, 6) (B, T, H, D) has D 6, the tables are for head_dim 4");
    auto x4 = parameter(randn<4>({1, 3, 2, 4}));
    CHECK_THROWS_WITH(rotary_embedding(x4, tables, 4),
                      "rotary_embedding: positions 4 to 6 of x (1, 3, 2, 4) are past the tables' 6 positions");
    CHECK_NOTHROW(rotary_embedding(x4, tables, 3));
    CHECK_THROWS_AS(rotary_tables<float>(5, 4), value_error);
    CHECK_THROWS_AS(rotary_tables<float>(4, 4, 0.0), value_error);
    CHECK_THROWS_AS(rotary_embedding(Var<double, 4>{}, tables), value_error);
}

}  // namespace test_ops_rotary
