// The attention's softmax over score rows, with its masks applied in registers (attention_core.hpp
// uses it per head, on the keys the head does not ignore), and its backward over rows.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/simd.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad::nn::detail {

// The masks applied to one score row in place: + additive, -inf where ignored.
template <Real T>
void apply_masks_row(T* row, std::size_t n, const T* ignore, const T* additive) {
    if (additive)
        for (std::size_t j = 0; j < n; ++j) row[j] += additive[j];
    if (ignore)
        for (std::size_t j = 0; j < n; ++j) row[j] = ignore[j] != T(0) ? -std::numeric_limits<T>::infinity() : row[j];
}

// f(j, count, v) on the row's vectors at 0, W, 2W, ...: v holds its `count` elements, `fill` after.
template <Real T, class F>
[[gnu::always_inline]] inline void for_each_vector(const T* row, std::size_t n, T fill, F f) {
    constexpr std::size_t W = simd::lanes<T>;
    std::size_t j = 0;
    for (; j + W <= n; j += W) f(j, W, simd::Vec<T>::load_unaligned(row + j));
    if (j < n) f(j, n - j, simd::load_part(row + j, n - j, fill));
}

// Softmax of `count` score rows of n in place (rows ld apart), with the masks ignore(r) and
// additive(r) of row r applied: ignored keys get weight 0, a fully masked row (every key ignored
// or -inf) gives all zeros; a NaN score makes the row NaN. SIMD W lanes at a time, the last
// partial vector included. The masks are applied in registers, twice, rather than stored and
// reloaded, and a row of one vector is stored once; phase by phase over groups of rows, so that
// the dependency chains of short rows (max, then exp and sum, then scale) overlap.
template <Real T, class Ignore, class Additive>
void masked_softmax_rows(T* rows, std::size_t count, std::size_t n, std::size_t ld, Ignore ignore,
                         Additive additive) {
    using batch = simd::Vec<T>;
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    // the scores at row[j, j + part) with masks applied, -inf after them
    const auto masked = [](batch v, const T* ignore_row, const T* additive_row, std::size_t j, std::size_t part) {
        const auto load = [&](const T* p) { return part == simd::lanes<T> ? batch::load_unaligned(p) : simd::load_part(p, part); };
        if (additive_row) v += load(additive_row + j);
        if (ignore_row) v = xsimd::select(load(ignore_row + j) != batch(T(0)), batch(neg_inf), v);
        return v;
    };
    constexpr std::size_t group = 8;
    std::array<T, group> max, inv_sum;
    const bool single = n <= simd::lanes<T>;
    std::array<batch, group> single_e;
    for (std::size_t first = 0; first < count; first += group) {
        const std::size_t size = std::min(group, count - first);
        for (std::size_t g = 0; g < size; ++g) {
            const T *ignore_row = ignore(first + g), *additive_row = additive(first + g);
            batch lanes_max(neg_inf);
            for_each_vector(rows + (first + g) * ld, n, neg_inf, [&](std::size_t j, std::size_t part, batch v) {
                lanes_max = xsimd::max(lanes_max, masked(v, ignore_row, additive_row, j, part));
            });
            max[g] = simd::reduce_max(lanes_max);
        }
        // e_j = exp(s_j - max), 0 in the padding lanes (a NaN score gives a NaN sum: the row is NaN)
        for (std::size_t g = 0; g < size; ++g) {
            T* row = rows + (first + g) * ld;
            const T *ignore_row = ignore(first + g), *additive_row = additive(first + g);
            if (max[g] == neg_inf) {  // fully masked, unless a NaN hides there
                apply_masks_row(row, n, ignore_row, additive_row);
                const bool has_nan = std::any_of(row, row + n, [](T v) { return std::isnan(v); });
                std::fill(row, row + n, has_nan ? std::numeric_limits<T>::quiet_NaN() : T(0));
                continue;
            }
            batch lanes_sum(T(0));
            const batch vmax(max[g]);
            for_each_vector(row, n, neg_inf, [&](std::size_t j, std::size_t part, batch v) {
                const batch e = xsimd::exp(masked(v, ignore_row, additive_row, j, part) - vmax);
                if (single) single_e[g] = e;  // a row of one vector stays in registers
                else simd::store_part(row + j, e, part);
                lanes_sum += e;
            });
            inv_sum[g] = T(1) / simd::reduce_add(lanes_sum);
        }
        for (std::size_t g = 0; g < size; ++g) {
            if (max[g] == neg_inf) continue;  // done above
            T* row = rows + (first + g) * ld;
            const batch inv(inv_sum[g]);
            if (single) simd::store_part(row, single_e[g] * inv, n);
            else for_each_vector(row, n, T(0), [&](std::size_t j, std::size_t part, batch v) { simd::store_part(row + j, v * inv, part); });
        }
    }
}

// Σ_j a_j · b_j, W lanes at a time.
template <Real T>
T dot(const T* a, const T* b, std::size_t n) {
    simd::Vec<T> acc(T(0));
    for_each_vector(a, n, T(0), [&](std::size_t j, std::size_t count, simd::Vec<T> va) {
        acc = xsimd::fma(va, simd::load_part(b + j, count), acc);
    });
    return simd::reduce_add(acc);
}

// The softmax's backward on rows [first, last) of ld-wide rows, columns [begin, begin + n) only
// (P is 0 outside them): out = factor · P ⊙ (dP − Σ_j dP ⊙ P).
template <Real T>
void softmax_backward_rows(const T* P, const T* dP, T* out, std::size_t ld, std::size_t first, std::size_t last,
                           std::size_t begin, std::size_t n, T factor) {
    using batch = simd::Vec<T>;
    for (std::size_t r = first; r < last; ++r) {
        const std::size_t row = r * ld + begin;
        const T *p = P + row, *dp = dP + row;
        const batch dp_dot_p(dot(dp, p, n)), vfactor(factor);
        for_each_vector(p, n, T(0), [&](std::size_t j, std::size_t count, batch vp) {
            simd::store_part(out + row + j, vp * (simd::load_part(dp + j, count) - dp_dot_p) * vfactor, count);
        });
    }
}

}  // namespace xgrad::nn::detail
