// Anomaly mode: the first op whose forward output or backward gradient holds NaN or inf is named.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>

#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_core_anomaly {

using namespace xgrad;
using T1 = xt::xtensor<double, 1>;
using T2 = xt::xtensor<double, 2>;

namespace {
// The message of the anomaly_error `f` throws ("" if it throws none).
template <class F>
std::string anomaly_message(F f) {
    try {
        f();
    } catch (const anomaly_error& e) {
        return e.what();
    }
    return "";
}
}  // namespace

TEST_CASE("anomaly: log of a negative number names the op, its tape position, the element and the shape") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T1{1.0, -2.0, 3.0});
    auto offset = eval(x * 1.0);  // tape position 0, finite
    DetectAnomaly on;
    CHECK(anomaly_enabled());
    const std::string msg = anomaly_message([&] { Var<double, 1> y = log(offset); });
    CHECK(msg == "anomaly: the forward of elementwise log(x) (tape position 1) produced NaN at element 1 of (3,) "
                 "in its output");
}

TEST_CASE("anomaly: overflow in exp is reported as inf; without anomaly mode it passes silently") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T2{{1.0, 800.0}, {-800.0, 0.0}});
    Var<double, 2> quiet = exp(x * 2.0);
    CHECK(std::isinf(quiet.value()(0, 1)));
    DetectAnomaly on;
    const std::string msg = anomaly_message([&] { Var<double, 2> y = exp(x * 2.0); });
    CHECK(msg == "anomaly: the forward of elementwise exp(mul(x, c)) (tape position 1) produced inf at element 1 of "
                 "(2, 2) in its output");
}

TEST_CASE("anomaly: a finite forward with an infinite gradient names the backward op and the input it wrote") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T1{4.0, 0.0});
    DetectAnomaly on;
    auto a = eval(x * 1.0);  // 0: the input whose gradient breaks
    auto b = eval(sqrt(a));  // 1: d sqrt(a)/da = 1 / (2 sqrt(a)) is inf at a = 0
    auto loss = sum(b);      // 2
    CHECK(loss.value()() == doctest::Approx(2.0));
    const std::string msg = anomaly_message([&] { backward(loss); });
    CHECK(msg == "anomaly: the backward of elementwise sqrt(x) (tape position 1) produced inf at element 1 of (2,) in "
                 "the gradient of its input elementwise mul(x, c) (tape position 0)");
}

TEST_CASE("anomaly: a NaN gradient written into a parameter names the parameter") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T1{0.0, 1.0});
    DetectAnomaly on;
    auto loss = sum(eval(sqrt(x) * 0.0));  // forward 0; backward 0 · inf = NaN into x
    const std::string msg = anomaly_message([&] { backward(loss); });
    CHECK(msg == "anomaly: the backward of elementwise mul(sqrt(x), c) (tape position 0) produced NaN at element 0 of "
                 "(2,) in the gradient of its input parameter");
}

TEST_CASE("anomaly: a non-finite seed is reported before anything runs") {
    Tape t;
    TapeScope scope(t);
    auto x = parameter(T1{1.0, 2.0});
    DetectAnomaly on;
    auto y = eval(x * 3.0);
    const std::string msg = anomaly_message(
        [&] { backward(y, T1{1.0, std::numeric_limits<double>::quiet_NaN()}); });
    CHECK(msg == "anomaly: the gradient seeded into the output of elementwise mul(x, c) (tape position 0) holds NaN "
                 "at element 1 of (2,)");
    CHECK_FALSE(x.has_grad());
}

TEST_CASE("anomaly: -inf from log_softmax of a masked score is a result, not an anomaly; training steps pass") {
    Tape t;
    TapeScope scope(t);
    const double inf = std::numeric_limits<double>::infinity();
    auto scores = parameter(T2{{0.5, -inf, 1.0}});
    DetectAnomaly on;
    auto logp = log_softmax(scores, 1);
    CHECK(logp.value()(0, 1) == -inf);
    auto loss = cross_entropy(scores, xt::xtensor<std::int64_t, 1>{0});
    CHECK_NOTHROW(backward(loss));
    CHECK(scores.grad()(0, 1) == 0.0);
    CHECK(scores.grad()(0, 0) < 0.0);
    // -inf times a zero weight is a NaN of the user's own making, and it is reported
    const std::string msg = anomaly_message([&] { Var<double, 2> w = logp * constant(T2{{1.0, 0.0, 0.0}}); });
    CHECK(msg == "anomaly: the forward of elementwise mul(x, x) (tape position 2) produced NaN at element 1 of "
                 "(1, 3) in its output");
}

TEST_CASE("anomaly: the scope restores the previous setting; set_detect_anomaly switches it for the thread") {
    CHECK_FALSE(anomaly_enabled());
    {
        DetectAnomaly on;
        CHECK(anomaly_enabled());
        {
            DetectAnomaly off(false);
            CHECK_FALSE(anomaly_enabled());
        }
        CHECK(anomaly_enabled());
    }
    CHECK_FALSE(anomaly_enabled());
    set_detect_anomaly(true);
    CHECK(anomaly_enabled());
    set_detect_anomaly(false);
    CHECK_FALSE(anomaly_enabled());
}

TEST_CASE("anomaly: an attention training step with a fully masked query row stays clean") {
    Tape t;
    TapeScope scope(t);
    Generator gen(3);
    nn::MultiheadAttention<double> mha({.embed_dim = 8, .num_heads = 2}, gen);
    xt::xtensor<double, 3> xv = xt::xtensor<double, 3>::from_shape({4, 2, 8});
    for (auto& v : xv) v = gen.normal();
    xt::xtensor<bool, 2> key_padding = xt::zeros<bool>({2, 4});
    for (std::size_t s = 0; s < 4; ++s) key_padding(1, s) = true;  // sequence 1: every key ignored
    DetectAnomaly on;
    auto x = constant(xv);
    nn::MhaForwardOptions<double> fo;
    fo.key_padding_mask = ignore_mask(key_padding);
    auto out = mha.forward(x, x, x, fo);
    auto loss = sum(eval(out.output * out.output));
    CHECK_NOTHROW(backward(loss));
    CHECK(std::isfinite(loss.value()()));
}

}  // namespace test_core_anomaly
