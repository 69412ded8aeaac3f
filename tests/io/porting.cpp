// docs/porting.md, tested: the PyTorch model of tests/fixtures/make_porting.py, ported to xgrad
// step by step, loads torch's state_dict and gives torch's output and every gradient.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "support/porting_model.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/xgrad.hpp"

namespace test_io_porting {

using namespace xgrad;

namespace {

using testing::Model;

const std::filesystem::path fixtures = std::filesystem::path(XGRAD_FIXTURES) / "porting";

}  // namespace

TEST_CASE("porting a PyTorch model (docs/porting.md): torch's output and gradients from torch's state_dict") {
    // step 3: build, load, switch to evaluation
    Generator gen(0);
    Model<double> model(8, 2, 2, 3, 0.1, gen);
    io::load_state_dict(model, fixtures / "model.npz");
    set_training(model, false);

    // step 4: the same inputs, the output and gradients compared with torch's
    const auto parity = io::read_npz(fixtures / "parity.npz");
    const auto src = parameter(parity.at("src").as<double, 3>());  // a leaf: its gradient is compared too
    const auto pos = constant(parity.at("pos").as<double, 3>());
    const auto out = model(src, pos);
    CHECK(xt::allclose(out.value(), parity.at("output").as<double, 3>(), 1e-12, 1e-12));
    backward(out, parity.at("grad_output").as<double, 3>());
    CHECK(xt::allclose(src.grad(), parity.at("grad.src").as<double, 3>(), 1e-12, 1e-12));
    std::size_t compared = 0;
    for (const auto& p : named_parameters<double>(model)) {
        CAPTURE(p.name);
        const auto want = parity.at("grad." + p.name).as_xarray<double>();
        REQUIRE(p.grad() != nullptr);
        const auto got = xt::adapt(p.grad(), p.size, xt::no_ownership(), want.shape());
        CHECK(xt::allclose(got, want, 1e-12, 1e-12));
        CHECK(xt::amax(xt::abs(want))() > 0);  // the comparison is not of zeros
        ++compared;
    }
    CHECK(compared == 2 * 8 + 2);  // every parameter torch has
    tape().clear();
}

}  // namespace test_io_porting
