// Optimizers against PyTorch 1.13 (tests/fixtures/make_optim.py): Adam, AdamW, SGD parameter
// trajectories and state, clip_grad_norm, state checkpointing, WarmupCosine, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "support/fixtures.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/optim/adam.hpp"
#include "xgrad/optim/clip.hpp"
#include "xgrad/optim/schedule.hpp"
#include "xgrad/optim/sgd.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_optim_optim {

using namespace xgrad;

namespace {

struct Toy {
    BOOST_HANA_DEFINE_STRUCT(Toy, (Var<double, 2>, w), (Var<double, 1>, b));
};

template <std::size_t N>
xt::xtensor<double, N> fixture(const std::string& name) {
    return testing::fixture<N>("optim", name);
}

struct FloatBox {
    BOOST_HANA_DEFINE_STRUCT(FloatBox, (Var<float, 1>, p));
};
struct DoubleBox {
    BOOST_HANA_DEFINE_STRUCT(DoubleBox, (Var<double, 1>, p));
};

Toy make_toy() {
    return Toy{parameter(fixture<2>("init_w")), parameter(fixture<1>("init_b"))};
}

// Largest |a − b| / max(|b|, 1e-300) over two arrays of the same size.
template <class A, class B>
double max_rel_diff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double x = double(a.data()[i]), y = double(b.data()[i]);
        m = std::max(m, std::abs(x - y) / std::max(std::abs(y), 1e-300));
    }
    return m;
}

// Sets the fixture's gradients of step k (b has none where present_b is 0).
void set_grads(Toy& toy, std::size_t k) {
    static const auto gw = fixture<3>("grads_w");
    static const auto gb = fixture<2>("grads_b");
    static const auto present = fixture<1>("present_b");
    xgrad::zero_grad(toy);
    backward(toy.w, xt::xtensor<double, 2>(xt::view(gw, k)));
    if (present(k) != 0) backward(toy.b, xt::xtensor<double, 1>(xt::view(gb, k)));
}

// Runs steps [from, to) of `config` and checks the parameters after each against torch's.
template <class Opt>
double run_and_compare(Toy& toy, Opt& opt, const std::string& config, std::size_t from, std::size_t to) {
    const auto want_w = fixture<3>(config + "_w");
    const auto want_b = fixture<2>(config + "_b");
    double worst = 0;
    for (std::size_t k = from; k < to; ++k) {
        set_grads(toy, k);
        opt.step();
        worst = std::max(worst, max_rel_diff(toy.w.value(), xt::xtensor<double, 2>(xt::view(want_w, k))));
        worst = std::max(worst, max_rel_diff(toy.b.value(), xt::xtensor<double, 1>(xt::view(want_b, k))));
    }
    return worst;
}

constexpr double rtol = 1e-10;

}  // namespace

TEST_CASE("Adam and AdamW: parameters after each of 5 steps match torch (rtol 1e-10)") {
    struct Config {
        std::string name;
        optim::AdamOptions adam;
        bool decoupled;
        optim::AdamWOptions adamw;
    };
    const Config configs[] = {
        {"adam_plain", {.lr = 1e-2}, false, {}},
        {"adam_amsgrad", {.lr = 1e-2, .amsgrad = true}, false, {}},
        {"adam_wd", {.lr = 1e-2, .weight_decay = 0.1}, false, {}},
        {"adam_maximize", {.lr = 1e-2, .maximize = true}, false, {}},
        {"adam_all",
         {.lr = 0.05, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.05, .amsgrad = true, .maximize = true},
         false,
         {}},
        {"adamw", {}, true, {.lr = 1e-2}},
        {"adamw_amsgrad_wd", {}, true, {.lr = 0.05, .weight_decay = 0.3, .amsgrad = true}},
    };
    for (const auto& c : configs) {
        CAPTURE(c.name);
        Toy toy = make_toy();
        double err;
        if (c.decoupled) {
            optim::AdamW opt(toy, c.adamw);
            err = run_and_compare(toy, opt, c.name, 0, 5);
        } else {
            optim::Adam opt(toy, c.adam);
            err = run_and_compare(toy, opt, c.name, 0, 5);
        }
        MESSAGE(c.name << ": max relative error " << err);
        CHECK(err <= rtol);
    }
}

TEST_CASE("Adam state matches torch's and is keyed by parameter name") {
    for (std::string config : {"adam_amsgrad", "adamw_amsgrad_wd"}) {
        CAPTURE(config);
        Toy toy = make_toy();
        std::map<std::string, optim::AdamState<double>> state;
        if (config == "adam_amsgrad") {
            optim::Adam opt(toy, {.lr = 1e-2, .amsgrad = true});
            run_and_compare(toy, opt, config, 0, 5);
            state = opt.state();
        } else {
            optim::AdamW opt(toy, {.lr = 0.05, .weight_decay = 0.3, .amsgrad = true});
            run_and_compare(toy, opt, config, 0, 5);
            state = opt.state();
        }
        REQUIRE(state.size() == 2);
        for (std::string p : {"w", "b"}) {
            REQUIRE(state.count(p));
            const auto& s = state.at(p);
            const std::string prefix = config + "_state_" + p + "_";
            CHECK(double(s.step) == fixture<1>(prefix + "step")(0));  // b skipped one step: 4
            REQUIRE(s.max_exp_avg_sq);
            if (p == "w") {
                CHECK(max_rel_diff(s.exp_avg, fixture<2>(prefix + "exp_avg")) <= rtol);
                CHECK(max_rel_diff(s.exp_avg_sq, fixture<2>(prefix + "exp_avg_sq")) <= rtol);
                CHECK(max_rel_diff(*s.max_exp_avg_sq, fixture<2>(prefix + "max_exp_avg_sq")) <= rtol);
            } else {
                CHECK(max_rel_diff(s.exp_avg, fixture<1>(prefix + "exp_avg")) <= rtol);
                CHECK(max_rel_diff(s.exp_avg_sq, fixture<1>(prefix + "exp_avg_sq")) <= rtol);
                CHECK(max_rel_diff(*s.max_exp_avg_sq, fixture<1>(prefix + "max_exp_avg_sq")) <= rtol);
            }
        }
        CHECK(state.at("b").step == 4);
        CHECK(state.at("w").step == 5);
    }
}

TEST_CASE("SGD: parameters after each of 5 steps match torch (rtol 1e-10)") {
    const std::pair<std::string, optim::SGDOptions> configs[] = {
        {"sgd_plain", {.lr = 0.1}},
        {"sgd_momentum", {.lr = 0.1, .momentum = 0.9}},
        {"sgd_nesterov", {.lr = 0.1, .momentum = 0.9, .nesterov = true}},
        {"sgd_dampening", {.lr = 0.1, .momentum = 0.9, .dampening = 0.3}},
        {"sgd_wd", {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .maximize = true}},
    };
    for (const auto& [name, options] : configs) {
        CAPTURE(name);
        Toy toy = make_toy();
        optim::SGD opt(toy, options);
        const double err = run_and_compare(toy, opt, name, 0, 5);
        MESSAGE(name << ": max relative error " << err);
        CHECK(err <= rtol);
        if (name == "sgd_dampening") {
            CHECK(max_rel_diff(*opt.state().at("w").momentum_buffer,
                               fixture<2>("sgd_dampening_state_w_momentum_buffer")) <= rtol);
            CHECK(max_rel_diff(*opt.state().at("b").momentum_buffer,
                               fixture<1>("sgd_dampening_state_b_momentum_buffer")) <= rtol);
        }
        if (name == "sgd_plain") CHECK(opt.state().empty());  // no momentum, no buffers
    }
}

TEST_CASE("optimizer state checkpoint: 3 steps, save, restore into a fresh optimizer, 2 more steps") {
    SUBCASE("Adam") {
        Toy toy = make_toy();
        optim::Adam<double>::State saved;
        {
            optim::Adam opt(toy, {.lr = 0.05, .betas = {0.8, 0.99}, .eps = 1e-6, .weight_decay = 0.05,
                                  .amsgrad = true, .maximize = true});
            run_and_compare(toy, opt, "adam_all", 0, 3);
            saved = opt.state();
        }
        optim::Adam opt(named_parameters<double>(toy), {.lr = 0.05, .betas = {0.8, 0.99}, .eps = 1e-6,
                                                         .weight_decay = 0.05, .amsgrad = true, .maximize = true});
        opt.load_state(saved);
        CHECK(run_and_compare(toy, opt, "adam_all", 3, 5) <= rtol);
    }
    SUBCASE("SGD") {
        Toy toy = make_toy();
        const optim::SGDOptions o{.lr = 0.1, .momentum = 0.9, .dampening = 0.3};
        optim::SGD<double>::State saved;
        {
            optim::SGD opt(toy, o);
            run_and_compare(toy, opt, "sgd_dampening", 0, 3);
            saved = opt.state();
        }
        optim::SGD opt(toy, o);
        opt.load_state(saved);
        CHECK(run_and_compare(toy, opt, "sgd_dampening", 3, 5) <= rtol);
    }
    SUBCASE("load_state errors name the parameter") {
        Toy toy = make_toy();
        optim::Adam opt(toy);
        optim::Adam<double>::State bad;
        bad["nope"].exp_avg = xt::zeros<double>({3});
        CHECK_THROWS_AS(opt.load_state(bad), value_error);
        optim::Adam<double>::State wrong_shape;
        wrong_shape["b"].exp_avg = xt::zeros<double>({4});
        wrong_shape["b"].exp_avg_sq = xt::zeros<double>({3});
        CHECK_THROWS_WITH_AS(opt.load_state(wrong_shape),
                             "Adam: load_state: exp_avg of \"b\" has shape (4,) but the parameter has shape (3,)",
                             shape_error);
    }
}

TEST_CASE("optimizers skip parameters without a gradient and zero_grad clears them") {
    Toy toy = make_toy();
    const auto w0 = toy.w.value();
    const auto b0 = toy.b.value();
    optim::Adam opt(toy, {.lr = 0.1});
    backward(toy.w, xt::xtensor<double, 2>(xt::ones<double>({2, 3})));
    opt.step();
    CHECK(toy.b.value() == b0);  // no grad: untouched, no state
    CHECK(opt.state().count("b") == 0);
    // first Adam step moves every element by lr (m̂ / sqrt(v̂) = ±1, up to eps)
    for (std::size_t i = 0; i < 6; ++i)
        CHECK(toy.w.value().data()[i] == doctest::Approx(w0.data()[i] - 0.1).epsilon(1e-7));
    opt.zero_grad();
    for (const auto& p : opt.parameters()) CHECK(p.grad() == nullptr);
    const auto w1 = toy.w.value();
    opt.step();
    CHECK(toy.w.value() == w1);
}

TEST_CASE("clip_grad_norm matches torch.nn.utils.clip_grad_norm_") {
    for (std::string name : {"l2", "l3", "l1", "linf", "noclip"}) {
        CAPTURE(name);
        const double max_norm = name == "l2" ? 1.0 : name == "l3" ? 0.5 : name == "l1" ? 2.0 : name == "linf" ? 0.3 : 100;
        const double norm_type = name == "l3" ? 3 : name == "l1" ? 1 : name == "linf" ? INFINITY : 2;
        Toy toy = make_toy();
        backward(toy.w, fixture<2>("clip_grad_w"));
        backward(toy.b, fixture<1>("clip_grad_b"));
        const double total = optim::clip_grad_norm(named_parameters<double>(toy), max_norm, norm_type);
        CHECK(std::abs(total - fixture<1>("clip_" + name + "_total")(0)) <= rtol * total);
        CHECK(max_rel_diff(toy.w.grad(), fixture<2>("clip_" + name + "_w")) <= rtol);
        CHECK(max_rel_diff(toy.b.grad(), fixture<1>("clip_" + name + "_b")) <= rtol);
    }
}

TEST_CASE("clip_grad_norm: hand-computed, module overload, no gradients, errors") {
    Toy toy{parameter(xt::xtensor<double, 2>::from_shape({1, 2})), parameter(xt::xtensor<double, 1>{0.0})};
    CHECK(optim::clip_grad_norm(toy, 1.0) == 0);  // no gradient anywhere
    backward(toy.w, xt::xtensor<double, 2>{{3, 4}});  // norm 5; b has no grad and is ignored
    const double total = optim::clip_grad_norm(toy, 1.0);
    CHECK(total == doctest::Approx(5).epsilon(1e-15));
    CHECK(toy.w.grad()(0, 0) == doctest::Approx(3 / (5 + 1e-6)).epsilon(1e-15));
    CHECK(toy.w.grad()(0, 1) == doctest::Approx(4 / (5 + 1e-6)).epsilon(1e-15));
    CHECK(!toy.b.has_grad());
    CHECK_THROWS_AS(optim::clip_grad_norm(toy, 1.0, 0.0), value_error);
    CHECK_THROWS_AS(optim::clip_grad_norm(toy, -1.0), value_error);
    backward(toy.w, xt::xtensor<double, 2>{{NAN, 0}});
    CHECK_THROWS_AS(optim::clip_grad_norm(toy, 1.0, 2.0, true), value_error);
}

TEST_CASE("clip_grad_norm on float gradients of many sizes: exact in double, the same on 1 and 2 threads") {
    // Parameters of 1..40 and 300000 elements (parts of 16-element runs, one large enough to split
    // the work over threads), every norm type; each result against a long double reference.
    const std::vector<std::size_t> sizes{1, 7, 15, 16, 17, 33, 40, 300000};
    for (const double norm_type : {2.0, 3.0, double(INFINITY)}) {
        CAPTURE(norm_type);
        std::array<std::vector<std::vector<float>>, 2> grads;  // one copy per thread count
        for (std::size_t k = 0; k < sizes.size(); ++k) {
            std::vector<float> g(sizes[k]);
            for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(std::sin(double(i * 7 + k)) * (1 + double(k)));
            grads[0].push_back(g), grads[1].push_back(g);
        }
        long double reference = 0;
        for (const auto& g : grads[0]) {
            long double part = 0;
            for (const float x : g) {
                const long double a = std::fabs(static_cast<long double>(x));
                part = std::isinf(norm_type) ? std::max(part, a) : part + std::pow(a, static_cast<long double>(norm_type));
            }
            reference = std::isinf(norm_type) ? std::max(reference, part) : reference + part;
        }
        if (!std::isinf(norm_type)) reference = std::pow(reference, 1 / static_cast<long double>(norm_type));
        std::array<double, 2> totals{};
        for (const std::size_t threads : {1, 2}) {
            set_num_threads(threads);
            std::vector<ParameterRef<float>> refs;
            for (auto& g : grads[threads - 1]) {
                ParameterRef<float> r;
                r.size = g.size();
                r.mutable_grad = [&g] { return g.data(); };
                refs.push_back(r);
            }
            totals[threads - 1] = optim::clip_grad_norm(refs, 1.0, norm_type);
        }
        set_num_threads(1);
        CHECK(std::abs(totals[0] - double(reference)) <= 1e-12 * double(reference));
        CHECK(totals[0] == totals[1]);
        CHECK(grads[0] == grads[1]);
        const float coef = float(1.0 / (totals[0] + 1e-6));  // every gradient scaled by it
        CHECK(grads[0].back()[123] == float(std::sin(double(123 * 7 + 7)) * 8) * coef);
    }
}

TEST_CASE("WarmupCosine: hand-computed values and apply()") {
    const optim::WarmupCosine sched(1e-3, 10, 110, 1e-4);
    CHECK(sched.lr(0) == 0);
    CHECK(sched.lr(5) == doctest::Approx(5e-4).epsilon(1e-15));
    CHECK(sched.lr(10) == doctest::Approx(1e-3).epsilon(1e-15));  // warmup done: base lr
    // halfway through the cosine: min + (base − min)/2 = 5.5e-4
    CHECK(sched.lr(60) == doctest::Approx(5.5e-4).epsilon(1e-14));
    // a quarter: cos(π/4) = √2/2 -> 1e-4 + 9e-4 · (1 + √2/2)/2
    CHECK(sched.lr(35) == doctest::Approx(1e-4 + 9e-4 * (1 + std::numbers::sqrt2 / 2) / 2).epsilon(1e-14));
    CHECK(sched.lr(110) == doctest::Approx(1e-4).epsilon(1e-15));
    CHECK(sched.lr(1000) == 1e-4);
    const optim::WarmupCosine no_warmup(0.5, 0, 4);
    CHECK(no_warmup.lr(0) == 0.5);
    CHECK(no_warmup.lr(2) == doctest::Approx(0.25).epsilon(1e-15));
    CHECK(no_warmup.lr(4) == 0);
    // nanoGPT's get_lr(it): learning_rate · (it + 1) / (warmup_iters + 1) while warming up
    const optim::WarmupCosine nanogpt(1e-3, 100, 2000, 1e-4, 1);
    CHECK(nanogpt.lr(0) == doctest::Approx(1e-3 / 101).epsilon(1e-15));
    CHECK(nanogpt.lr(99) == doctest::Approx(1e-3 * 100 / 101).epsilon(1e-15));
    CHECK(nanogpt.lr(100) == doctest::Approx(1e-3).epsilon(1e-15));
    CHECK(nanogpt.lr(2000) == doctest::Approx(1e-4).epsilon(1e-15));

    Toy toy = make_toy();
    optim::SGD opt(toy, {.lr = 1});
    CHECK(sched.apply(opt, 5) == doctest::Approx(5e-4));
    CHECK(opt.lr() == doctest::Approx(5e-4));
    optim::AdamW adamw(toy);
    optim::Optimizer<double>& base = adamw;
    sched.apply(base, 60);
    CHECK(adamw.options().lr == doctest::Approx(5.5e-4));
    CHECK_THROWS_AS(optim::WarmupCosine(1e-3, 10, 5), value_error);
}

TEST_CASE("optimizers on a Linear model: construction, defaults, errors") {
    Generator gen(3);
    nn::Linear<double> lin(3, 2, gen);
    optim::AdamW opt(lin);
    CHECK(opt.options().weight_decay == 1e-2);
    CHECK(opt.options().lr == 1e-3);
    optim::Adam adam(lin);
    CHECK(adam.options().weight_decay == 0);
    CHECK(adam.options().betas.second == 0.999);
    REQUIRE(opt.parameters().size() == 2);
    CHECK(opt.parameters()[0].name == "weight");
    CHECK(opt.parameters()[1].name == "bias");

    CHECK_THROWS_AS(optim::Adam(lin, {.lr = -1}), value_error);
    CHECK_THROWS_AS(optim::Adam(lin, {.betas = {1.0, 0.9}}), value_error);
    CHECK_THROWS_AS(optim::AdamW(lin, {.eps = -1}), value_error);
    CHECK_THROWS_AS(optim::SGD(lin, {}), value_error);  // lr is required
    CHECK_THROWS_AS(optim::SGD(lin, {.lr = 0.1, .nesterov = true}), value_error);
    CHECK_THROWS_AS(optim::SGD(lin, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}), value_error);
    auto params = named_parameters<double>(lin);
    params.push_back(params[0]);
    CHECK_THROWS_AS(optim::SGD(params, {.lr = 0.1}), value_error);  // duplicate
    CHECK_THROWS_AS(adam.set_lr(-0.5), value_error);
}

TEST_CASE("Adam with float parameters follows the double trajectory") {
    // a quadratic bowl: L = ½ Σ p², dL/dp = p; 20 steps in float and in double stay close
    FloatBox fb{parameter(xt::xtensor<float, 1>{1.0f, -2.0f, 0.5f})};
    DoubleBox db{parameter(xt::xtensor<double, 1>{1.0, -2.0, 0.5})};
    optim::Adam of(fb, {.lr = 0.1, .amsgrad = true});
    optim::Adam od(db, {.lr = 0.1, .amsgrad = true});
    for (int k = 0; k < 20; ++k) {
        of.zero_grad(), od.zero_grad();
        backward(fb.p, xt::xtensor<float, 1>(fb.p.value()));
        backward(db.p, xt::xtensor<double, 1>(db.p.value()));
        of.step(), od.step();
    }
    for (std::size_t i = 0; i < 3; ++i) CHECK(fb.p.value()(i) == doctest::Approx(db.p.value()(i)).epsilon(1e-4));
    CHECK(std::abs(db.p.value()(1)) < 2.0);  // it did descend
}

}  // namespace test_optim_optim
