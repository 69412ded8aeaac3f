// The tape: recording, backward, accumulation, no-grad, storage reuse.
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_core_tape {

using namespace xgrad;
using T2 = xt::xtensor<double, 2>;

TEST_CASE("backward from a scalar loss gives d(sum(a*b))/da = b") {
    Tape t;
    TapeScope scope(t);
    auto a = parameter(T2{{1, 2}, {3, 4}});
    auto b = parameter(T2{{5, 6}, {7, 8}});
    auto loss = sum(a * b);
    CHECK(loss.value()() == doctest::Approx(1 * 5 + 2 * 6 + 3 * 7 + 4 * 8));
    backward(loss);
    CHECK(a.grad() == b.value());
    CHECK(b.grad() == a.value());
}

TEST_CASE("parameters accumulate across backward calls until zero_grad") {
    Tape t;
    TapeScope scope(t);
    auto a = parameter(T2{{1, -2}});
    auto loss = sum(a * a * 3.0);  // d/da = 6a
    backward(loss);
    backward(loss);
    CHECK(a.grad() == T2{{12, -24}});
    a.zero_grad();
    CHECK(a.grad() == T2{{0, 0}});
    backward(loss);
    CHECK(a.grad() == T2{{6, -12}});
}

TEST_CASE("backward(y, grad_y) is a vector-Jacobian product from a non-scalar output") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T2{{1, 2, 3}});
    Var<double, 2> y = x * x;  // J = diag(2x)
    backward(y, T2{{1, 10, 100}});
    CHECK(x.grad() == T2{{2, 40, 600}});
}

TEST_CASE("intermediate gradients can be inspected after backward, and restart at each backward") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T2{{0.5, -1.0}});
    Var<double, 2> h = x * 2.0;
    auto loss = sum(h * h);  // dloss/dh = 2h
    backward(loss);
    CHECK(h.grad() == T2{{2.0, -4.0}});
    backward(loss);
    CHECK(h.grad() == T2{{2.0, -4.0}});  // intermediates are not accumulated
    CHECK(x.grad() == T2{{8.0, -16.0}});  // leaves are: 2 * (2h * 2)
}

TEST_CASE("keep_intermediate_grads false: the parameters' gradients of a GPT step; each op's given back") {
    nn::GPTConfig c{.n_layer = 2, .n_head = 2, .n_embd = 8, .block_size = 8, .vocab_size = 11, .dropout = 0};
    Generator gen(3);
    const nn::GPT<double> model(c, gen);
    const xt::xtensor<std::int64_t, 2> idx{{1, 4, 0, 2, 9, 3}, {3, 3, 1, 0, 10, 5}}, targets{{4, 7, 2, 1, 0, 6}, {0, 3, 3, 2, 8, 1}};
    Tape t;
    TapeScope scope(t);
    const auto step = [&](bool keep) {
        zero_grad(model);
        const auto logits = model(idx);
        const auto loss = nn::gpt_loss(logits, targets);
        backward(loss, {.keep_intermediate_grads = keep});
        std::vector<xt::xarray<double>> grads;
        for_each_parameter(model, [&](const std::string&, const auto& p) { grads.emplace_back(p.grad()); });
        std::size_t with_grad = 0;
        for (std::size_t i = 0; i < t.size(); ++i) with_grad += t[i].has_grad();
        t.clear();
        return std::pair{grads, with_grad};
    };
    const auto [kept, kept_count] = step(true);
    const auto [released, released_count] = step(false);
    REQUIRE(kept.size() == released.size());
    for (std::size_t i = 0; i < kept.size(); ++i) {
        CHECK(xt::amax(xt::abs(kept[i]))() > 0);
        CHECK(released[i] == kept[i]);  // the same sums in the same order: bitwise
    }
    CHECK(kept_count > 10);  // every op of the step kept its gradient
    CHECK(released_count == 0);
    // a second such step takes its buffers from the pool (that it allocates nothing:
    // tests/check_bench_allocs.sh, whose workloads release): the same gradients again
    CHECK(step(false).first == kept);
}

TEST_CASE("a fused expression records exactly one node, with the unfused chain's gradients") {
    auto a = parameter(randn<2>({3, 4}, 1));
    auto b = parameter(randn<2>({3, 4}, 2));
    auto c = parameter(randn<1>({4}, 3));
    auto d = parameter(randn<2>({3, 4}, 4));
    Tape fused_tape, chain_tape;
    xt::xtensor<double, 2> ga, gb, gd, y_fused;
    xt::xtensor<double, 1> gc;
    {
        TapeScope scope(fused_tape);
        Var<double, 2> y = tanh(a * b + c) * d;
        CHECK(fused_tape.size() == 1);
        y_fused = y.value();
        backward(sum(y));
        ga = a.grad(), gb = b.grad(), gc = c.grad(), gd = d.grad();
    }
    for (auto* p : {&a, &b, &d}) p->zero_grad();
    c.zero_grad();
    {
        TapeScope scope(chain_tape);
        Var<double, 2> ab = a * b;
        Var<double, 2> s = ab + c;
        Var<double, 2> th = tanh(s);
        Var<double, 2> y = th * d;
        CHECK(chain_tape.size() == 4);
        CHECK(xt::allclose(y.value(), y_fused, 0, 1e-15));
        backward(sum(y));
    }
    CHECK(xt::allclose(a.grad(), ga, 0, 1e-14));
    CHECK(xt::allclose(b.grad(), gb, 0, 1e-14));
    CHECK(xt::allclose(c.grad(), gc, 0, 1e-14));
    CHECK(xt::allclose(d.grad(), gd, 0, 1e-14));
}

TEST_CASE("NoGrad computes values and records nothing") {
    Tape t;
    TapeScope scope(t);
    auto a = parameter(T2{{1, 2}});
    NoGrad ng;
    Var<double, 2> y = exp(a) + 1.0;
    CHECK(t.size() == 0);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.value()(0, 1) == doctest::Approx(std::exp(2.0) + 1));
    CHECK_THROWS_AS(backward(sum(y)), tape_error);
}

TEST_CASE("constants receive no gradient and a graph of constants needs none") {
    Tape t;
    TapeScope scope(t);
    auto k = constant(T2{{1, 2}});
    auto a = parameter(T2{{3, 4}});
    backward(sum(a * k));
    CHECK(a.grad() == k.value());
    CHECK_FALSE(k.requires_grad());
    Var<double, 2> only_constants = k * 2.0;
    CHECK(t.size() == 2);  // a*k and the sum; the constant-only product is not recorded
    CHECK_FALSE(only_constants.requires_grad());
}

TEST_CASE("clearing the tape keeps its nodes: the next step reuses their storage") {
    Tape t;
    TapeScope scope(t);
    auto w = parameter(randn<2>({8, 8}));
    auto step = [&] {
        Var<double, 2> h = tanh(w * 2.0);
        auto loss = mean(h * h);
        backward(loss);
        return h.value().data();
    };
    const double* first = step();
    t.clear();
    const double* second = step();
    CHECK(t.capacity() == 3);  // h, h * h, mean
    CHECK(first == second);  // same buffer, no new allocation

    // A Var the user still holds is never overwritten by the next step.
    Var<double, 2> kept = tanh(w * 2.0);
    t.clear();
    Var<double, 2> fresh = tanh(w * 3.0);
    CHECK(kept.node() != fresh.node());
    CHECK(kept.value()(0, 0) == doctest::Approx(std::tanh(2 * w.value()(0, 0))));
}

TEST_CASE("backward errors name what is wrong") {
    Tape t;
    TapeScope scope(t);
    auto a = parameter(T2{{1, 2}});
    Var<double, 2> y = a * a;
    CHECK_THROWS_WITH_AS(backward(y), doctest::Contains("(1, 2)"), tape_error);
    CHECK_THROWS_WITH_AS(backward(y, T2{{1, 2, 3}}), doctest::Contains("(1, 3)"), shape_error);
    t.clear();
    CHECK_THROWS_AS(backward(y, T2{{1, 1}}), tape_error);  // y's tape was cleared
}

TEST_CASE("an intermediate kept across clear() cannot silently cut the gradient path") {
    Tape t;
    TapeScope scope(t);
    auto w = parameter(T2{{1, 2}});
    Var<double, 2> h = w * 3.0;
    t.clear();
    CHECK(h.value() == T2{{3, 6}});  // the value stays readable
    CHECK_THROWS_WITH_AS(eval(h * 5.0), doctest::Contains("tape that has since been cleared"), tape_error);
    auto k = h.detach();  // explicit: a constant copy
    Var<double, 2> y = k * 5.0 + w;
    backward(sum(y));
    CHECK(w.grad() == T2{{1, 1}});
}

TEST_CASE("backward rejects an empty Var and accepts its own gradient as the seed") {
    CHECK_THROWS_AS(backward(Var<double, 1>{}), tape_error);
    CHECK_THROWS_AS(backward(Var<double, 0>{}), tape_error);
    Tape t;
    TapeScope scope(t);
    auto w = parameter(T2{{1, 2}});
    Var<double, 2> y = w * 3.0;
    backward(y, T2{{1, 1}});
    backward(y, y.grad());  // the seed aliases y's gradient buffer
    CHECK(w.grad() == T2{{6, 6}});
}

TEST_CASE("a tape holding a very long chain is destroyed without deep recursion") {
    auto w = parameter(T2{{1}});
    {
        Tape t;
        TapeScope scope(t);
        Var<double, 2> h = w * 1.0;
        for (int i = 0; i < 200000; ++i) h = h + 1.0;
        CHECK(h.value()(0, 0) == 200001.0);
    }
    CHECK(w.value()(0, 0) == 1.0);
}

}  // namespace test_core_tape
