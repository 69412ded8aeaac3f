// The SIMD helpers (core/simd.hpp) and attention's masked softmax over score rows
// (nn/attention_softmax.hpp) against scalar references, for every row length from 1 to 3 vectors
// and 1 more, so that whole vectors, partial ones and both together are covered.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace test_nn_attention_softmax {

using namespace xgrad;

TEST_CASE_TEMPLATE("simd: partial loads and stores touch only their elements; max and sum of lanes", T, float, double) {
    constexpr std::size_t W = simd::lanes<T>;
    std::vector<T> data(W + 2);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = T(i) - T(2.5);
    for (std::size_t count = 1; count <= W; ++count) {
        INFO("count ", count);
        alignas(64) T lanes[W];
        simd::load_part(data.data(), count, T(-7)).store_aligned(lanes);
        for (std::size_t l = 0; l < W; ++l) CHECK(lanes[l] == (l < count ? data[l] : T(-7)));
        simd::load_part(data.data(), count).store_aligned(lanes);
        for (std::size_t l = 0; l < W; ++l) CHECK(lanes[l] == (l < count ? data[l] : T(0)));
        std::vector<T> out(W + 2, T(99));
        simd::store_part(out.data(), simd::Vec<T>(T(1)), count);
        for (std::size_t l = 0; l < out.size(); ++l) CHECK(out[l] == (l < count ? T(1) : T(99)));
    }
    const auto v = simd::Vec<T>::load_unaligned(data.data());  // -2.5, -1.5, ..., W - 3.5
    CHECK(simd::reduce_max(v) == T(W) - T(3.5));
    CHECK(simd::reduce_add(v) == doctest::Approx(double(W) * (double(W) - 1) / 2 - 2.5 * double(W)));
}

// Row r: softmax over keys j of score + additive, keys with ignore ≠ 0 left out (weight 0); a
// row with no key left is all 0, or all NaN when a NaN score is among its keys.
template <class T>
std::vector<double> reference(const std::vector<T>& scores, const std::vector<T>& ignore,
                              const std::vector<T>& additive, std::size_t n) {
    std::vector<double> out(scores.size());
    for (std::size_t r = 0; r < scores.size() / n; ++r) {
        std::vector<double> s(n);
        double max = -INFINITY;
        bool nan = false;
        for (std::size_t j = 0; j < n; ++j) {
            s[j] = ignore[r * n + j] != 0 ? -INFINITY : double(T(scores[r * n + j] + additive[r * n + j]));
            nan = nan || std::isnan(s[j]);
            if (s[j] > max) max = s[j];
        }
        double sum = 0;
        for (std::size_t j = 0; j < n; ++j) sum += max == -INFINITY ? 0 : std::exp(s[j] - max);
        for (std::size_t j = 0; j < n; ++j)
            out[r * n + j] = nan ? NAN : max == -INFINITY ? 0 : std::exp(s[j] - max) / sum;
    }
    return out;
}

TEST_CASE_TEMPLATE("attention's masked softmax rows match a scalar reference for every row length", T, float, double) {
    constexpr std::size_t W = simd::lanes<T>;
    std::mt19937 rng(5);
    std::normal_distribution<double> normal;
    std::bernoulli_distribution coin(0.3);
    const std::size_t rows = 13;  // more than one group of 8
    for (std::size_t n = 1; n <= 3 * W + 1; ++n) {
        INFO("row length ", n);
        std::vector<T> scores(rows * n), ignore(rows * n), additive(rows * n);
        for (std::size_t i = 0; i < scores.size(); ++i)
            scores[i] = T(3 * normal(rng)), ignore[i] = coin(rng) ? T(1) : T(0), additive[i] = T(normal(rng));
        for (std::size_t j = 0; j < n; ++j) {
            ignore[2 * n + j] = T(1);                                         // row 2: fully masked
            if (j == n - 1) scores[2 * n + j] = std::numeric_limits<T>::quiet_NaN();  // ... a NaN under the mask
            ignore[4 * n + j] = T(0);                                         // row 4: a NaN score, unmasked
            if (j == n / 2) scores[4 * n + j] = std::numeric_limits<T>::quiet_NaN();
        }
        additive[5 * n] = -std::numeric_limits<T>::infinity();  // row 5: an additive -inf
        const auto expected = reference(scores, ignore, additive, n);
        // the rows in place inside wider ones (ld = n + 3, as a head's live keys among all keys):
        // the 3 elements between them must stay untouched
        const std::size_t ld = n + 3;
        const T sentinel = T(-7.25);
        std::vector<T> wide(rows * ld, sentinel);
        for (std::size_t r = 0; r < rows; ++r) std::copy_n(scores.begin() + r * n, n, wide.begin() + r * ld);
        nn::detail::masked_softmax_rows(
            wide.data(), rows, n, ld, [&](std::size_t r) { return ignore.data() + r * n; },
            [&](std::size_t r) { return additive.data() + r * n; });
        const double tolerance = std::is_same_v<T, float> ? 2e-6 : 1e-14;
        for (std::size_t i = 0; i < scores.size(); ++i) {
            INFO("row ", i / n, " key ", i % n);
            const T got = wide[i / n * ld + i % n];
            if (std::isnan(expected[i])) CHECK(std::isnan(got));
            else CHECK(std::fabs(double(got) - expected[i]) <= tolerance);
        }
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = n; j < ld; ++j) CHECK(wide[r * ld + j] == sentinel);
        // no masks at all: plain softmax, each row sums to 1
        std::vector<T> plain(rows * n);
        for (auto& v : plain) v = T(normal(rng));
        nn::detail::masked_softmax_rows(
            plain.data(), rows, n, n, [](std::size_t) { return static_cast<const T*>(nullptr); },
            [](std::size_t) { return static_cast<const T*>(nullptr); });
        for (std::size_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (std::size_t j = 0; j < n; ++j) sum += plain[r * n + j];
            CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
        }
        std::vector<T> a(n), b(n);
        double dot = 0;
        for (std::size_t j = 0; j < n; ++j) a[j] = T(normal(rng)), b[j] = T(normal(rng)), dot += double(a[j]) * b[j];
        CHECK(nn::detail::dot(a.data(), b.data(), n) == doctest::Approx(dot).epsilon(1e-5));
    }
}

}  // namespace test_nn_attention_softmax
