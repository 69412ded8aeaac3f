// Reading the PyTorch fixtures (tests/fixtures/<family>/<name>.npy) and comparing arrays.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xnpy.hpp>
#include <xtensor/xtensor.hpp>

namespace xgrad::testing {

template <std::size_t N, class V = double>
xt::xtensor<V, N> fixture(const std::string& family, const std::string& name) {
    auto a = xt::load_npy<V>(std::string(XGRAD_FIXTURES) + "/" + family + "/" + name + ".npy");
    const std::string where = family + "/" + name;
    REQUIRE_MESSAGE(a.dimension() == N, where);
    if constexpr (N == 0) {
        // The value set directly: converting copies the empty shape into std::array<size_t, 0>, whose
        // null data() g++ 12 flags (-Wnonnull) though nothing is copied.
        xt::xtensor<V, 0> scalar;
        scalar() = a();
        return scalar;
    } else {
        return xt::xtensor<V, N>(a);
    }
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

}  // namespace xgrad::testing
