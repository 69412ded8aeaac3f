// The SIMD helpers (core/simd.hpp) and the softmax kernels (kernels/softmax.hpp) against
// scalar references, for every row length from 1 to 3 vectors and 1 more, so that whole vectors,
// partial ones and both together are covered: masked rows, and softmax and log_softmax forward
// and backward along rows and down columns.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace test_ops_softmax_kernels {

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

TEST_CASE_TEMPLATE("masked softmax rows match a scalar reference for every row length", T, float, double) {
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
        struct Masks {  // row r's masks, as softmax_rows reads them
            const std::vector<T>& ignore_rows;
            const std::vector<T>& additive_rows;
            std::size_t n;
            const T* ignore(std::size_t r) const { return ignore_rows.data() + r * n; }
            const T* additive(std::size_t r) const { return additive_rows.data() + r * n; }
            // rows 1, 4, 7, 10: keys from kept(r) on cut off, as a causal rule does (row 7: every key)
            std::size_t kept(std::size_t r, std::size_t) const { return r == 7 ? 0 : r % 3 == 1 ? (r + n) / 2 : n; }
        };
        const Masks masks{ignore, additive, n};
        std::vector<T> ignore_with_cut = ignore;
        for (std::size_t r = 0; r < rows; ++r)
            for (std::size_t j = std::min(n, masks.kept(r, n)); j < n; ++j) ignore_with_cut[r * n + j] = T(1);
        const auto expected = reference(scores, ignore_with_cut, additive, n);
        // the rows in place inside wider ones (ld = n + 3, as a head's live keys among all keys):
        // the 3 elements between them must stay untouched
        const std::size_t ld = n + 3;
        const T sentinel = T(-7.25);
        std::vector<T> wide(rows * ld, sentinel);
        for (std::size_t r = 0; r < rows; ++r) std::copy_n(scores.begin() + r * n, n, wide.begin() + r * ld);
        kernels::softmax_rows(wide.data(), rows, n, ld, kernels::EmptyLine::zeros, masks);
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
        kernels::softmax_rows(plain.data(), rows, n, n, kernels::EmptyLine::zeros, kernels::NoMasks<T>{});
        for (std::size_t r = 0; r < rows; ++r) {
            double sum = 0;
            for (std::size_t j = 0; j < n; ++j) sum += plain[r * n + j];
            CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
        }
        std::vector<T> a(n), b(n);
        double dot = 0;
        for (std::size_t j = 0; j < n; ++j) a[j] = T(normal(rng)), b[j] = T(normal(rng)), dot += double(a[j]) * b[j];
        CHECK(kernels::dot(a.data(), b.data(), n) == doctest::Approx(dot).epsilon(1e-5));
    }
}

// Softmax (or log_softmax) of each line of `lines` values taken `stride` apart, in double.
template <class T>
std::vector<double> line_reference(const std::vector<T>& x, std::size_t lines, std::size_t n, std::size_t line_step,
                                   std::size_t stride, bool log) {
    std::vector<double> out(x.size());
    for (std::size_t l = 0; l < lines; ++l) {
        double max = -INFINITY, sum = 0;
        for (std::size_t j = 0; j < n; ++j) max = std::max(max, double(x[l * line_step + j * stride]));
        for (std::size_t j = 0; j < n; ++j) sum += std::exp(double(x[l * line_step + j * stride]) - max);
        for (std::size_t j = 0; j < n; ++j) {
            const double v = double(x[l * line_step + j * stride]) - max;
            out[l * line_step + j * stride] = log ? v - std::log(sum) : std::exp(v) / sum;
        }
    }
    return out;
}

// Its backward: dx = y ⊙ (dy − Σ dy ⊙ y), or dx = dy − exp(y) Σ dy, plus `beta` times the old dx.
template <class T>
std::vector<double> line_backward_reference(const std::vector<T>& y, const std::vector<T>& dy, const std::vector<T>& dx0,
                                            std::size_t lines, std::size_t n, std::size_t line_step, std::size_t stride,
                                            bool log, T beta) {
    std::vector<double> out(y.size());
    for (std::size_t l = 0; l < lines; ++l) {
        double sum = 0;
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t i = l * line_step + j * stride;
            sum += log ? double(dy[i]) : double(dy[i]) * double(y[i]);
        }
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t i = l * line_step + j * stride;
            const double d = log ? double(dy[i]) - std::exp(double(y[i])) * sum : double(y[i]) * (double(dy[i]) - sum);
            out[i] = double(beta) * double(dx0[i]) + d;
        }
    }
    return out;
}

template <class T>
void check_near(const std::vector<T>& got, const std::vector<double>& want, double tolerance) {
    for (std::size_t i = 0; i < got.size(); ++i) {
        INFO("element ", i);
        CHECK(std::fabs(double(got[i]) - want[i]) <= tolerance * (1 + std::fabs(want[i])));
    }
}

TEST_CASE_TEMPLATE("softmax and log_softmax along rows and down columns, forward and backward, every width", T, float,
                   double) {
    constexpr std::size_t W = simd::lanes<T>;
    const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-13;
    std::mt19937 rng(9);
    std::normal_distribution<double> normal;
    const auto random = [&](std::size_t size) {
        std::vector<T> v(size);
        for (auto& x : v) x = T(2 * normal(rng));
        return v;
    };
    const kernels::NoMasks<T> no_mask;
    for (bool log : {false, true})
        for (std::size_t width = 1; width <= 5 * W + 1; ++width) {
            INFO("log ", log, " width ", width);
            const std::size_t n = 7;  // the softmax's extent
            // rows: `width` rows of n; columns: an (n, width) block, the softmax down each column
            for (bool rows : {true, false}) {
                INFO("rows ", rows);
                const std::size_t lines = width, line_step = rows ? n : 1, stride = rows ? 1 : width;
                std::vector<T> y = random(n * width);
                const auto want = line_reference(y, lines, n, line_step, stride, log);
                if (rows) {
                    if (log) kernels::softmax_rows<true>(y.data(), lines, n, n, kernels::EmptyLine::nan, no_mask);
                    else kernels::softmax_rows(y.data(), lines, n, n, kernels::EmptyLine::nan, no_mask);
                } else {
                    if (log) kernels::softmax_columns<true>(y.data(), n, width, width, kernels::EmptyLine::nan);
                    else kernels::softmax_columns(y.data(), n, width, width, kernels::EmptyLine::nan);
                }
                check_near(y, want, tolerance);
                const std::vector<T> dy = random(y.size()), dx0 = random(y.size());
                for (T beta : {T(0), T(1)}) {
                    INFO("beta ", beta);
                    std::vector<T> dx = beta == T(0) ? std::vector<T>(y.size(), std::numeric_limits<T>::quiet_NaN()) : dx0;
                    const auto want_dx = line_backward_reference(y, dy, dx0, lines, n, line_step, stride, log, beta);
                    if (rows) {
                        if (log) kernels::softmax_backward_rows<true>(y.data(), dy.data(), dx.data(), n, 0, lines, 0, n, T(1), beta);
                        else kernels::softmax_backward_rows(y.data(), dy.data(), dx.data(), n, 0, lines, 0, n, T(1), beta);
                    } else {
                        if (log) kernels::softmax_backward_columns<true>(y.data(), dy.data(), dx.data(), n, width, width, T(1), beta);
                        else kernels::softmax_backward_columns(y.data(), dy.data(), dx.data(), n, width, width, T(1), beta);
                    }
                    check_near(dx, want_dx, tolerance);  // beta 0: the NaN there is never read
                }
            }
        }
}

TEST_CASE_TEMPLATE("a column of -inf gives NaN (softmax) or zeros (masked), as the caller asks", T, float, double) {
    constexpr T inf = std::numeric_limits<T>::infinity();
    const std::size_t n = 3, width = 2;  // column 0 all -inf, column 1 finite
    for (auto empty : {kernels::EmptyLine::nan, kernels::EmptyLine::zeros}) {
        std::vector<T> st{-inf, T(1), -inf, T(2), -inf, T(3)};
        kernels::softmax_columns(st.data(), n, width, width, empty);
        for (std::size_t j = 0; j < n; ++j) {
            if (empty == kernels::EmptyLine::nan) CHECK(std::isnan(st[j * width]));
            else CHECK(st[j * width] == T(0));
        }
        CHECK(double(st[1] + st[3] + st[5]) == doctest::Approx(1.0));
    }
}

}  // namespace test_ops_softmax_kernels
