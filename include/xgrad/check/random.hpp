// Deterministic random inputs for gradient checks and tests (same seed, same values).
#pragma once
#include <array>
#include <cstddef>
#include <random>

#include <xtensor/xtensor.hpp>

namespace xgrad {

// Standard-normal values from a fixed seed: the same inputs on every run.
template <std::size_t N>
xt::xtensor<double, N> randn(std::array<std::size_t, N> shape, unsigned seed = 1) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> d;
    xt::xtensor<double, N> x(shape);
    for (auto& v : x) v = d(rng);
    return x;
}

// Values in [lo, hi), for ops defined on a range (log, sqrt, ...).
template <std::size_t N>
xt::xtensor<double, N> uniform(std::array<std::size_t, N> shape, double lo, double hi, unsigned seed = 1) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    xt::xtensor<double, N> x(shape);
    for (auto& v : x) v = d(rng);
    return x;
}

}  // namespace xgrad
