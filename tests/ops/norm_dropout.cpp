// layer_norm, rms_norm, silu and rsqrt (PyTorch parity, errors) and dropout (statistics,
// determinism); their gradchecks are in checks/norm_dropout.cpp and checks/elementwise.cpp.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>


#include "support/fixtures.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_ops_norm_dropout {

using namespace xgrad;

namespace {

using testing::max_abs_diff;
const testing::Fixtures fixtures{"loss_norm"};

constexpr double tol = 1e-12;

}  // namespace

// ---------------------------------------------------------------- layer_norm

TEST_CASE("layer_norm: hand-computed values") {
    // row (1, 2, 3): mean 2, biased variance 2/3, so x̂ = (−1, 0, 1) · sqrt(3/2)
    const double s = std::sqrt(1.5);
    auto x = parameter(xt::xtensor<double, 2>{{1, 2, 3}, {5, 5, 5}});
    auto y = layer_norm(x, 1e-12);
    CHECK(y.value()(0, 0) == doctest::Approx(-s));
    CHECK(y.value()(0, 1) == doctest::Approx(0));
    CHECK(y.value()(0, 2) == doctest::Approx(s));
    CHECK(y.value()(1, 1) == 0);  // a constant row normalizes to 0
    auto w = parameter(xt::xtensor<double, 1>{2, 3, 4});
    auto b = parameter(xt::xtensor<double, 1>{1, 1, -1});
    auto ya = layer_norm(x, w, b, 1e-12);
    CHECK(ya.value()(0, 0) == doctest::Approx(1 - 2 * s));
    CHECK(ya.value()(0, 2) == doctest::Approx(4 * s - 1));
    backward(sum(ya));
    // dβ = Σ_rows dY = 2 per column; dγ = Σ_rows x̂ = (−s, 0, s) (the constant row has x̂ = 0)
    CHECK(max_abs_diff(b.grad(), xt::xtensor<double, 1>{2, 2, 2}) < tol);
    CHECK(max_abs_diff(w.grad(), xt::xtensor<double, 1>{-s, 0, s}) < tol);
    // float input
    auto xf = parameter(xt::xtensor<float, 1>{1.f, 2.f, 3.f});
    CHECK(layer_norm(xf, 0.0).value()(2) == doctest::Approx(float(s)));
}

TEST_CASE("float layer_norm: backward agrees with forward when |mean| >> std") {
    // x̂ must be (x − μ) · rstd with μ and rstd in double in backward too: in float, x − μ loses
    // every significant digit here (the float spacing at 1e4 is ~1e-3, the std ~1e-3).
    const xt::xtensor<float, 2> xv{{10000.f, 10000.001f, 10000.002f, 9999.999f}, {1.f, 2.f, 3.f, 4.f}};
    const xt::xtensor<float, 1> wv{1.f, 2.f, 3.f, 4.f}, bv{0.5f, 0.f, -0.5f, 1.f};
    const xt::xtensor<float, 2> gv{{1.f, -2.f, 3.f, 0.5f}, {1.f, 1.f, 1.f, 1.f}};
    auto x = parameter(xv);
    auto w = parameter(wv), b = parameter(bv);
    auto y = layer_norm(x, w, b, 1e-5);
    backward(y, gv);
    // the same formulas in double, on the same float inputs
    const std::size_t C = 4;
    xt::xtensor<double, 2> y_ref({2, C}), dx_ref({2, C});
    xt::xtensor<double, 1> dw_ref = xt::zeros<double>({C}), db_ref = xt::zeros<double>({C});
    for (std::size_t r = 0; r < 2; ++r) {
        double mu = 0, var = 0;
        for (std::size_t c = 0; c < C; ++c) mu += xv(r, c);
        mu /= C;
        for (std::size_t c = 0; c < C; ++c) var += (xv(r, c) - mu) * (xv(r, c) - mu);
        var /= C;
        const double rs = 1.0 / std::sqrt(var + 1e-5);
        double mean_g = 0, mean_gx = 0;
        for (std::size_t c = 0; c < C; ++c) {
            const double xhat = (xv(r, c) - mu) * rs, gh = double(gv(r, c)) * wv(c);
            y_ref(r, c) = xhat * wv(c) + bv(c);
            dw_ref(c) += gv(r, c) * xhat, db_ref(c) += gv(r, c);
            mean_g += gh / C, mean_gx += gh * xhat / C;
        }
        for (std::size_t c = 0; c < C; ++c) {
            const double xhat = (xv(r, c) - mu) * rs, gh = double(gv(r, c)) * wv(c);
            dx_ref(r, c) = rs * (gh - mean_g - xhat * mean_gx);
        }
    }
    // float rounding only: relative 1e-5 of each array's scale
    const auto close = [](const auto& got, const auto& ref) {
        return max_abs_diff(got, ref) < 1e-5 * std::max(1.0, double(xt::amax(xt::abs(ref))()));
    };
    CHECK(close(y.value(), y_ref));
    CHECK(close(w.grad(), dw_ref));
    CHECK(close(b.grad(), db_ref));
    CHECK(close(x.grad(), dx_ref));
    tape().clear();
}

TEST_CASE("layer_norm whose output needs no grad holds no reference to its inputs") {
    auto x = parameter(xt::xtensor<double, 2>{{1, 2, 3}, {4, 6, 8}});
    auto w = parameter(xt::xtensor<double, 1>{1, 2, 3});
    auto b = constant(xt::xtensor<double, 1>{0, 0, 1});
    NoGrad ng;
    auto y = layer_norm(x, w, b, 0.0);
    CHECK(x.node_ptr().use_count() == 1);
    CHECK(w.node_ptr().use_count() == 1);
    CHECK(b.node_ptr().use_count() == 1);
    CHECK(y.value()(1, 2) == doctest::Approx(3.0 * std::sqrt(1.5) + 1.0));
}

TEST_CASE("layer_norm matches PyTorch: output and gradients of x, weight, bias") {
    const auto x0 = fixtures.get<3>("ln_x"), g = fixtures.get<3>("ln_g");
    auto x = parameter(x0);
    auto w = parameter(fixtures.get<1>("ln_w")), b = parameter(fixtures.get<1>("ln_b"));
    auto y = layer_norm(x, w, b, 1e-5);
    CHECK(max_abs_diff(y.value(), fixtures.get<3>("ln_y")) < tol);
    backward(y, g);
    CHECK(max_abs_diff(x.grad(), fixtures.get<3>("ln_dx")) < tol);
    CHECK(max_abs_diff(w.grad(), fixtures.get<1>("ln_dw")) < tol);
    CHECK(max_abs_diff(b.grad(), fixtures.get<1>("ln_db")) < tol);

    auto x2 = parameter(x0);
    auto y2 = layer_norm(x2, 1e-3);
    CHECK(max_abs_diff(y2.value(), fixtures.get<3>("ln_plain_y")) < tol);
    backward(y2, g);
    CHECK(max_abs_diff(x2.grad(), fixtures.get<3>("ln_plain_dx")) < tol);
}

TEST_CASE("layer_norm errors") {
    auto x = parameter(randn<2>({2, 5}));
    CHECK_THROWS_WITH(layer_norm(x, parameter(randn<1>({4})), parameter(randn<1>({5}))),
                      "layer_norm: weight must have shape (5,) to match the last axis of x (2, 5), got (4,)");
    CHECK_THROWS_AS(layer_norm(x, parameter(randn<1>({5})), parameter(randn<1>({6}))), shape_error);
    CHECK_THROWS_AS(layer_norm(x, -1e-5), value_error);
}

// ---------------------------------------------------------------- rms_norm, silu, rsqrt

TEST_CASE("rms_norm matches llama2.c's RMSNorm in PyTorch: output and gradients of x and weight") {
    const auto x0 = fixtures.get<3>("rms_x"), g = fixtures.get<3>("rms_g");
    auto x = parameter(x0);
    auto w = parameter(fixtures.get<1>("rms_w"));
    auto y = rms_norm(x, w, 1e-5);
    CHECK(max_abs_diff(y.value(), fixtures.get<3>("rms_y")) < tol);
    backward(y, g);
    CHECK(max_abs_diff(x.grad(), fixtures.get<3>("rms_dx")) < tol);
    CHECK(max_abs_diff(w.grad(), fixtures.get<1>("rms_dw")) < tol);

    auto x2 = parameter(x0);
    auto y2 = rms_norm(x2);  // torch's default eps: the machine epsilon
    CHECK(max_abs_diff(y2.value(), fixtures.get<3>("rms_plain_y")) < tol);
    backward(y2, g);
    CHECK(max_abs_diff(x2.grad(), fixtures.get<3>("rms_plain_dx")) < tol);

    // the module: weight ones at construction, the same op
    nn::RMSNorm<double> norm(6, 1e-5);
    CHECK(norm.weight.value() == xt::xtensor<double, 1>(xt::ones<double>({6})));
    norm.weight = parameter(fixtures.get<1>("rms_w"));
    CHECK(max_abs_diff(norm(constant(x0)).value(), fixtures.get<3>("rms_y")) < tol);
    CHECK(nn::RMSNorm<double>(6, std::nullopt, false)(constant(x0)).value() == y2.value());
}

TEST_CASE("rms_norm: hand-computed values, float, and its errors") {
    auto x = constant(xt::xtensor<float, 1>{3, 4});  // mean square 12.5
    auto y = rms_norm(x, 0.0);
    CHECK(y.value()(0) == doctest::Approx(3 / std::sqrt(12.5)).epsilon(1e-6));
    CHECK(y.value()(1) == doctest::Approx(4 / std::sqrt(12.5)).epsilon(1e-6));
    CHECK(std::string(y.node()->op_name()) == "rms_norm");
    auto p = parameter(randn<2>({2, 5}));
    CHECK_THROWS_WITH(rms_norm(p, parameter(randn<1>({4}))),
                      "rms_norm: weight must have shape (5,) to match the last axis of x (2, 5), got (4,)");
    CHECK_THROWS_WITH(rms_norm(p, -1.0), "rms_norm: eps must be >= 0, got -1.000000");
    CHECK_THROWS_AS(nn::RMSNorm<double>(0), value_error);
    CHECK_THROWS_AS(nn::RMSNorm<double>(4, -1.0), value_error);
}

TEST_CASE("silu and rsqrt match PyTorch: values and gradients") {
    const auto x0 = fixtures.get<3>("rms_x"), g = fixtures.get<3>("rms_g");
    auto x = parameter(x0);
    Var<double, 3> y = silu(x);
    CHECK(max_abs_diff(y.value(), fixtures.get<3>("silu_y")) < tol);
    backward(y, g);
    CHECK(max_abs_diff(x.grad(), fixtures.get<3>("silu_dx")) < tol);

    auto xp = parameter(xt::xtensor<double, 3>(xt::abs(x0) + 0.1));
    Var<double, 3> r = rsqrt(xp);
    CHECK(max_abs_diff(r.value(), fixtures.get<3>("rsqrt_y")) < tol);
    backward(r, g);
    CHECK(max_abs_diff(xp.grad(), fixtures.get<3>("rsqrt_dx")) < tol);
}

// ---------------------------------------------------------------- dropout

TEST_CASE("Generator: same seed, same sequence") {
    Generator a(42), b(42), c(43);
    double first = a.uniform();
    CHECK(first == b.uniform());
    CHECK(first != c.uniform());
    CHECK(first >= 0);
    CHECK(first < 1);
    a.manual_seed(42);
    CHECK(a.uniform() == first);
    CHECK(a.initial_seed() == 42);
}

TEST_CASE("Generator::normal fills: Box-Muller on the generator's uniforms, pair by pair, and normal_ uses it") {
    // Element 2k and 2k+1 from the k-th pair of uniforms (u1, u2): against the formula in long double
    // with the same uniforms, for lengths that end inside, at and past a 32-element block.
    for (const std::size_t n : {1, 2, 31, 32, 33, 100}) {
        CAPTURE(n);
        Generator fill(11), formula(11);
        std::vector<double> values(n);
        fill.normal(values.data(), n, 0.5, 3.0);
        for (std::size_t k = 0; 2 * k < n; ++k) {
            const long double u1 = 1 - static_cast<long double>(formula.uniform());
            const long double theta = 2 * std::numbers::pi_v<long double> * static_cast<long double>(formula.uniform());
            const long double r = 3 * std::sqrt(-2 * std::log(u1));
            CHECK(std::abs(values[2 * k] - double(0.5 + r * std::cos(theta))) <= 1e-13 * (1 + std::abs(values[2 * k])));
            if (2 * k + 1 < n)
                CHECK(std::abs(values[2 * k + 1] - double(0.5 + r * std::sin(theta))) <= 1e-13 * (1 + std::abs(values[2 * k + 1])));
        }
        Generator again(11);
        std::vector<float> as_float(n);
        again.normal(as_float.data(), n, 0.5, 3.0);
        for (std::size_t i = 0; i < n; ++i) CHECK(as_float[i] == float(values[i]));
    }
    // The moments of 2^20 draws: mean, variance and kurtosis within 6 standard errors of N(0, 1)'s.
    constexpr std::size_t n = 1 << 20;
    Var<double, 1> p = parameter(xt::xtensor<double, 1>::from_shape({n}));
    Generator gen(3);
    init::normal_(p, 0, 1, gen);
    double mean = 0, var = 0, fourth = 0;
    for (const double x : p.value()) mean += x, var += x * x, fourth += x * x * x * x;
    mean /= n, var /= n, fourth /= n;
    CHECK(std::abs(mean) < 6 * std::sqrt(1.0 / n));
    CHECK(std::abs(var - 1) < 6 * std::sqrt(2.0 / n));
    CHECK(std::abs(fourth - 3) < 6 * std::sqrt(96.0 / n));
}

TEST_CASE("dropout: binomial fraction of zeros, overall, per word of the Philox block and in adjacent pairs") {
    // Each element is dropped independently with probability p: the number of zeros among n is
    // Binomial(n, p), whose fraction has std σ = sqrt(p(1−p)/n); a deviation of 6σ has probability
    // 2e-9. Checked overall, for each of the 64 positions i mod 64 (each word and lane of the
    // Philox blocks) and for adjacent pairs both kept ((1−p)² independent).
    constexpr std::size_t n = 1 << 20;
    Generator gen(7);
    for (double p : {0.1, 0.5, 0.8, 0.999}) {
        CAPTURE(p);
        auto x = constant(xt::xtensor<double, 1>(xt::ones<double>({n})));
        auto y = dropout(x, p, true, gen);
        std::size_t zeros = 0, scaled = 0, both_kept = 0;
        std::array<std::size_t, 64> zeros_at{};
        const double* v = y.value().data();
        for (std::size_t i = 0; i < n; ++i) {
            zeros += v[i] == 0, zeros_at[i % 64] += v[i] == 0;
            scaled += v[i] == 1 / (1 - p);
            if (i % 2 == 1) both_kept += v[i] != 0 && v[i - 1] != 0;
        }
        const auto within = [](std::size_t count, std::size_t trials, double q) {
            return std::abs(double(count) / double(trials) - q) < 6 * std::sqrt(q * (1 - q) / double(trials));
        };
        CHECK(within(zeros, n, p));
        CHECK(zeros + scaled == n);  // every kept value is exactly 1/(1-p)
        for (std::size_t r = 0; r < 64; ++r) CHECK(within(zeros_at[r], n / 64, p));
        CHECK(within(both_kept, n / 2, (1 - p) * (1 - p)));
    }
    // float: kept values are exactly float(1/(1-p))
    auto yf = dropout(constant(xt::xtensor<float, 1>(xt::ones<float>({1000}))), 0.3, true, gen);
    for (float v : yf.value()) CHECK((v == 0.f || v == float(1 / 0.7)));
}

TEST_CASE("dropout: same seed gives the same mask, backward uses it") {
    const auto x0 = randn<2>({8, 16}, 3);
    Generator g1(11), g2(11), g3(12);
    auto x = parameter(x0);
    auto y1 = dropout(x, 0.5, true, g1);
    auto y2 = dropout(x, 0.5, true, g2);
    auto y3 = dropout(x, 0.5, true, g3);
    CHECK(max_abs_diff(y1.value(), y2.value()) == 0);
    CHECK(max_abs_diff(y1.value(), y3.value()) > 0);
    backward(sum(y1));
    for (std::size_t i = 0; i < x0.size(); ++i) {  // dX = mask / (1 − p): 2 where kept, 0 where dropped
        const double kept = y1.value().data()[i] != 0;
        CHECK(x.grad().data()[i] == 2 * kept);
        CHECK(y1.value().data()[i] == x0.data()[i] * 2 * kept);
    }
    // float works the same way
    Generator gf(11);
    auto yf = dropout(parameter(xt::xtensor<float, 2>(x0)), 0.5, true, gf);
    for (std::size_t i = 0; i < x0.size(); ++i) CHECK((yf.value().data()[i] == 0) == (y1.value().data()[i] == 0));
}

TEST_CASE("dropout: eval mode and p == 0 are the identity, p == 1 gives zeros") {
    Generator gen(1);
    auto x = parameter(randn<2>({3, 4}));
    CHECK(dropout(x, 0.5, false, gen).node() == x.node());
    CHECK(dropout(x, 0.0, true, gen).node() == x.node());
    Generator fresh(1);
    CHECK(gen.uniform() == fresh.uniform());  // nothing was drawn
    auto y = dropout(x, 1.0, true, gen);
    CHECK(max_abs_diff(y.value(), xt::xtensor<double, 2>(xt::zeros<double>({3, 4}))) == 0);
    // p just below 1: still everything dropped (⌈p · 2³²⌉ = 2³²), every gradient 0
    auto y_almost = dropout(x, 1 - 1e-12, true, gen);
    CHECK(max_abs_diff(y_almost.value(), xt::xtensor<double, 2>(xt::zeros<double>({3, 4}))) == 0);
    backward(sum(y));
    CHECK(max_abs_diff(x.grad(), xt::xtensor<double, 2>(xt::zeros<double>({3, 4}))) == 0);
}

TEST_CASE("add_dropout is residual + dropout with the same mask, in one node") {
    const auto r0 = randn<2>({6, 50}, 4), x0 = randn<2>({6, 50}, 5), g0 = randn<2>({6, 50}, 6);
    auto r1 = parameter(r0), x1 = parameter(x0), r2 = parameter(r0), x2 = parameter(x0);
    Generator g1(21), g2(21);
    const std::size_t before = tape().size();
    auto fused = add_dropout(r1, x1, 0.4, true, g1);
    CHECK(tape().size() == before + 1);
    CHECK(std::string(fused.node()->op_name()) == "add_dropout");
    auto plain = eval(r2 + dropout(x2, 0.4, true, g2));
    // the same mask: r + x·m, rounded once (a fused multiply-add) or twice
    CHECK(max_abs_diff(fused.value(), plain.value()) < 1e-14);
    backward(fused, g0);
    backward(plain, g0);
    CHECK(max_abs_diff(x1.grad(), x2.grad()) == 0);
    CHECK(max_abs_diff(r1.grad(), g0) == 0);  // dR = dY
    // not training, or p = 0: the plain sum
    Generator g3(1);
    CHECK(max_abs_diff(add_dropout(r1, x1, 0.5, false, g3).value(), xt::xtensor<double, 2>(r0 + x0)) == 0);
    CHECK(max_abs_diff(add_dropout(r1, x1, 0.0, true, g3).value(), xt::xtensor<double, 2>(r0 + x0)) == 0);
    // p = 1: the residual alone; an infinite x gives NaN where dropped, as torch's x · 0
    auto inf = constant(xt::xtensor<double, 1>{1.0, std::numeric_limits<double>::infinity()});
    auto y = add_dropout(constant(xt::xtensor<double, 1>{2.0, 3.0}), inf, 1.0, true, g3);
    CHECK(y.value()(0) == 2.0);
    CHECK(std::isnan(y.value()(1)));
    CHECK_THROWS_WITH_AS(add_dropout(r1, parameter(randn<2>({6, 49})), 0.1, true, g3),
                         "add_dropout: residual has shape (6, 50) but x has shape (6, 49); they must be equal",
                         shape_error);
    CHECK_THROWS_AS(add_dropout(r1, x1, 1.5, true, g3), value_error);
    tape().clear();
}

TEST_CASE("dropout errors") {
    Generator gen;
    auto x = parameter(randn<1>({4}));
    CHECK_THROWS_AS(dropout(x, -0.1, true, gen), value_error);
    CHECK_THROWS_AS(dropout(x, 1.5, false, gen), value_error);
    CHECK_THROWS_AS(dropout(x, std::numeric_limits<double>::quiet_NaN(), true, gen), value_error);
}

TEST_CASE("layer_norm, dropout and cross_entropy reuse their tape nodes across steps") {
    const auto z0 = randn<2>({4, 6}, 21);
    const xt::xtensor<std::int64_t, 1> t{5, 0, -100, 2};
    auto z = parameter(z0);
    auto w = parameter(randn<1>({6}, 22)), b = parameter(randn<1>({6}, 23));
    Generator gen;
    Tape local;
    TapeScope scope(local);
    xt::xtensor<double, 2> first_grad;
    double first_loss = 0;
    for (int step = 0; step < 3; ++step) {
        z.zero_grad();
        gen.manual_seed(5);
        auto loss = cross_entropy(dropout(layer_norm(z, w, b), 0.25, true, gen), t, {.label_smoothing = 0.1});
        backward(loss);
        if (step == 0) first_grad = z.grad(), first_loss = loss.value()();
        CHECK(loss.value()() == first_loss);
        CHECK(max_abs_diff(z.grad(), first_grad) == 0);
        local.clear();
    }
    CHECK(local.capacity() == 3);  // the same three nodes, reused
}

}  // namespace test_ops_norm_dropout
