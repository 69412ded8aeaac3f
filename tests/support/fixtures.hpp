// Reading the PyTorch fixtures (tests/fixtures/<family>/<name>.npy) and comparing arrays.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/error.hpp"  // shape_str
#include "xgrad/io/npy.hpp"     // read_npy, compiled in libxgrad

namespace xgrad::testing {

template <std::size_t N, class V = double>
xt::xtensor<V, N> fixture(const std::string& family, const std::string& name) {
    // io_error naming the file on a missing file, another rank or another dtype
    return io::read_npy(std::string(XGRAD_FIXTURES) + "/" + family + "/" + name + ".npy").as<V, N>();
}

// One family's fixtures: `const Fixtures fixtures{"loss_norm"}; fixtures.get<2>("mse_dx")`.
struct Fixtures {
    std::string family;
    template <std::size_t N, class V = double>
    xt::xtensor<V, N> get(const std::string& name) const {
        return fixture<N, V>(family, name);
    }
};

// Largest |a - b| over two arrays of the same shape.
template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    REQUIRE(std::equal(a.shape().begin(), a.shape().end(), b.shape().begin(), b.shape().end()));
    double m = 0;
    for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a.data()[i]) - double(b.data()[i])));
    return m;
}

// Parity with torch in double: |ours - torch| <= 1e-10 · |torch| + 1e-13, element by element, same
// shape; `worst` keeps the largest |ours - torch| / (1 + |torch|) seen.
template <class A, class R>
void check_parity(const A& ours, const R& ref, const std::string& what, double& worst) {
    INFO(what << ": ours " << shape_str(ours.shape()) << " torch " << shape_str(ref.shape()));
    REQUIRE(ours.size() == ref.size());
    REQUIRE(std::equal(ours.shape().begin(), ours.shape().end(), ref.shape().begin(), ref.shape().end()));
    std::size_t bad = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
        const double a = ours.data()[i], b = ref.data()[i], err = std::abs(a - b);
        worst = std::max(worst, err / (1 + std::abs(b)));
        if (!(err <= 1e-10 * std::abs(b) + 1e-13)) ++bad;
    }
    CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ");
}

}  // namespace xgrad::testing
