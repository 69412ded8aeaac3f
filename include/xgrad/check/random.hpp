// Deterministic random inputs for gradient checks and tests (same seed, same values).
#pragma once
#include <array>
#include <cstddef>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/random.hpp"

namespace xgrad {

// Standard-normal values from a fixed seed: the same inputs on every run and every standard
// library (Generator, not std:: distributions).
template <std::size_t N>
xt::xtensor<double, N> randn(std::array<std::size_t, N> shape, unsigned seed = 1) {
    Generator gen(seed);
    xt::xtensor<double, N> x(shape);
    for (auto& v : x) v = gen.normal();
    return x;
}

// Values in [lo, hi), for ops defined on a range (log, sqrt, ...).
template <std::size_t N>
xt::xtensor<double, N> uniform(std::array<std::size_t, N> shape, double lo, double hi, unsigned seed = 1) {
    Generator gen(seed);
    xt::xtensor<double, N> x(shape);
    for (auto& v : x) v = gen.uniform(lo, hi);
    return x;
}

}  // namespace xgrad
