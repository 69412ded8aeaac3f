// The softmax kernels along rows, forward and backward: every softmax of xgrad runs them or their
// column twins (kernels/softmax_columns.hpp, included here: along any other axis and in the fused
// attention): softmax and log_softmax, masked_softmax, the attention paths of nn/attention/. Along
// a row the masks (ignore, additive) are applied in registers; used along the last axis and by the
// attention weights (queries are rows). A line whose every score is -inf gives NaN or zeros
// (EmptyLine); a NaN score makes its line NaN. The formulas, softmax_columns.hpp's, W = SIMD lanes.
//
// Offers: softmax_rows, softmax_backward_rows; the masks of the rows layout, masked (a vector, in
// registers) and apply_masks_row (a row, in memory); and their building blocks for_each_vector,
// dot, store_with_beta.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/kernels/softmax_columns.hpp"

namespace xgrad::kernels {

// f(j, count, v) on the row's vectors at 0, W, 2W, ...: v holds its `count` elements, `fill` after.
template <Real T, class F>
[[gnu::always_inline]] inline void for_each_vector(const T* row, std::size_t n, T fill, F f) {
    constexpr std::size_t W = simd::lanes<T>;
    std::size_t j = 0;
    for (; j + W <= n; j += W) f(j, W, simd::Vec<T>::load_unaligned(row + j));
    if (j < n) f(j, n - j, simd::load_part(row + j, n - j, fill));
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

// The masks of the rows layout, applied to the scores v at row[j, j + part) of one score row:
// + additive, then -inf where ignored (ignore and additive: that row's masks, null for none).
template <Real T>
[[gnu::always_inline]] inline simd::Vec<T> masked(simd::Vec<T> v, const T* ignore, const T* additive, std::size_t j,
                                                  std::size_t part) {
    using batch = simd::Vec<T>;
    const auto load = [&](const T* p) { return part == simd::lanes<T> ? batch::load_unaligned(p) : simd::load_part(p, part); };
    if (additive) v += load(additive + j);
    if (ignore) v = xsimd::select(load(ignore + j) != batch(T(0)), batch(-std::numeric_limits<T>::infinity()), v);
    return v;
}
// The same on a row of n scores in place.
template <Real T>
void apply_masks_row(T* row, std::size_t n, const T* ignore, const T* additive) {
    if (!ignore && !additive) return;
    for_each_vector(row, n, T(0), [&](std::size_t j, std::size_t part, simd::Vec<T> v) {
        simd::store_part(row + j, masked(v, ignore, additive, j, part), part);
    });
}

// out[0, count) = beta · out + v, beta 0 or 1 (0: out is not read).
template <Real T>
[[gnu::always_inline]] inline void store_with_beta(T* out, simd::Vec<T> v, std::size_t count, T beta) {
    if (beta != T(0)) v += simd::load_part(out, count);
    simd::store_part(out, v, count);
}

// ---- rows ----

// The masks of softmax_rows' rows: masks.ignore(i) and masks.additive(i) are row i's (null: none),
// and row i of n keys ignores keys [masks.kept(i, n), n) too (a causal rule, cut off unread).
// RowMasks (score_masks.hpp) reads them from merged masks; NoMasks has none.
template <Real T>
struct NoMasks {
    const T* ignore(std::size_t) const { return nullptr; }
    const T* additive(std::size_t) const { return nullptr; }
    std::size_t kept(std::size_t, std::size_t n) const { return n; }
};

// Softmax (or, Log, log_softmax) of `count` rows of n in place, rows ld apart, with the masks of
// each row applied: ignored keys get weight 0. Phase by phase over groups of rows, so that the
// dependency chains of short rows (max, then exp and sum, then scale) overlap; a row of one vector
// stays in registers between the phases. shifts (optional, log_softmax): row r's max + log Σ, the
// logsumexp (NaN for a row whose every score is -inf), so that y = s − shift.
template <bool Log = false, Real T, class Masks>
void softmax_rows(T* rows, std::size_t count, std::size_t n, std::size_t ld, EmptyLine empty, const Masks& masks,
                  T* shifts = nullptr) {
    using batch = simd::Vec<T>;
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    constexpr std::size_t group = 8;
    std::array<T, group> max, shift;  // shift: 1 / Σ (softmax) or max + log Σ (log_softmax)
    std::array<std::size_t, group> kept;  // keys [kept, n) of the row: ignored, never read
    const bool single = !Log && n <= simd::lanes<T>;
    std::array<batch, group> single_e;
    for (std::size_t first = 0; first < count; first += group) {
        const std::size_t size = std::min(group, count - first);
        for (std::size_t g = 0; g < size; ++g) {
            const T *ignore_row = masks.ignore(first + g), *additive_row = masks.additive(first + g);
            kept[g] = std::min(n, masks.kept(first + g, n));
            batch lanes_max(neg_inf);
            for_each_vector(rows + (first + g) * ld, kept[g], neg_inf, [&](std::size_t j, std::size_t part, batch v) {
                lanes_max = xsimd::max(lanes_max, masked(v, ignore_row, additive_row, j, part));
            });
            max[g] = simd::reduce_max(lanes_max);
        }
        // e_j = exp(s_j - max), 0 in the padding lanes and the cut keys (a NaN score gives a NaN sum:
        // the row is NaN)
        for (std::size_t g = 0; g < size; ++g) {
            T* row = rows + (first + g) * ld;
            const T *ignore_row = masks.ignore(first + g), *additive_row = masks.additive(first + g);
            if (max[g] == neg_inf) {  // every score -inf, unless a NaN hides there
                apply_masks_row(row, kept[g], ignore_row, additive_row);
                const bool has_nan = std::any_of(row, row + kept[g], [](T v) { return std::isnan(v); });
                std::fill(row, row + n, has_nan || empty == EmptyLine::nan ? std::numeric_limits<T>::quiet_NaN() : T(0));
                continue;
            }
            batch lanes_sum(T(0));
            const batch vmax(max[g]);
            for_each_vector(row, kept[g], neg_inf, [&](std::size_t j, std::size_t part, batch v) {
                const batch e = xsimd::exp(masked(v, ignore_row, additive_row, j, part) - vmax);
                if constexpr (!Log) {
                    if (single) single_e[g] = e;
                    else simd::store_part(row + j, e, part);
                }
                lanes_sum += e;
            });
            if (!Log && !single) std::fill(row + kept[g], row + n, T(0));
            const T sum = simd::reduce_add(lanes_sum);
            shift[g] = Log ? max[g] + std::log(sum) : T(1) / sum;
        }
        if (shifts)
            for (std::size_t g = 0; g < size; ++g)
                shifts[first + g] = max[g] == neg_inf ? std::numeric_limits<T>::quiet_NaN() : shift[g];
        for (std::size_t g = 0; g < size; ++g) {
            if (max[g] == neg_inf) continue;  // done above
            T* row = rows + (first + g) * ld;
            const batch s(shift[g]);
            if constexpr (Log) {
                const T *ignore_row = masks.ignore(first + g), *additive_row = masks.additive(first + g);
                for_each_vector(row, kept[g], T(0), [&](std::size_t j, std::size_t part, batch v) {
                    simd::store_part(row + j, masked(v, ignore_row, additive_row, j, part) - s, part);
                });
                std::fill(row + kept[g], row + n, neg_inf - shift[g]);  // NaN in a NaN row, as masked keys
            } else if (single) {  // single_e is 0 past kept (its lanes were loaded as -inf)
                simd::store_part(row, single_e[g] * s, n);
            } else {  // the cut keys hold 0: 0 · s, NaN in a NaN row, as masked keys
                for_each_vector(row, n, T(0), [&](std::size_t j, std::size_t part, batch v) { simd::store_part(row + j, v * s, part); });
            }
        }
    }
}

// The backward of softmax_rows on rows [first, last) of ld-wide rows, columns [begin, begin + n)
// only (Y is 0 outside them): out = beta · out + dS, dS as at the top (factor: softmax only).
template <bool Log = false, Real T>
void softmax_backward_rows(const T* Y, const T* dY, T* out, std::size_t ld, std::size_t first, std::size_t last,
                           std::size_t begin, std::size_t n, T factor, T beta = T(0)) {
    using batch = simd::Vec<T>;
    for (std::size_t r = first; r < last; ++r) {
        const std::size_t row = r * ld + begin;
        const T *y = Y + row, *dy = dY + row;
        if constexpr (Log) {  // dS = dY − exp(Y) · Σ dY
            batch acc(T(0));
            for_each_vector(dy, n, T(0), [&](std::size_t, std::size_t, batch v) { acc += v; });
            const batch sum(simd::reduce_add(acc));
            for_each_vector(y, n, T(0), [&](std::size_t j, std::size_t count, batch vy) {
                store_with_beta(out + row + j, simd::load_part(dy + j, count) - xsimd::exp(vy) * sum, count, beta);
            });
        } else {  // dS = factor · Y ⊙ (dY − Σ dY ⊙ Y)
            const batch dy_dot_y(dot(dy, y, n)), vfactor(factor);
            for_each_vector(y, n, T(0), [&](std::size_t j, std::size_t count, batch vy) {
                store_with_beta(out + row + j, vy * (simd::load_part(dy + j, count) - dy_dot_y) * vfactor, count, beta);
            });
        }
    }
}

}  // namespace xgrad::kernels

// Compiled once in libxgrad (xgrad/core/compiled.hpp): without masks (with the rows' own masks:
// kernels/score_masks.hpp), softmax and log-softmax.
namespace xgrad {
#define XGRAD_DETAIL_SOFTMAX_ROWS_COMPILED(EXTERN, LOG, T)                                                        \
    EXTERN template void kernels::softmax_rows<LOG, T, kernels::NoMasks<T>>(                                      \
        T*, std::size_t, std::size_t, std::size_t, kernels::EmptyLine, const kernels::NoMasks<T>&, T*);           \
    EXTERN template void kernels::softmax_backward_rows<LOG, T>(const T*, const T*, T*, std::size_t, std::size_t, \
                                                                std::size_t, std::size_t, std::size_t, T, T);
#define XGRAD_DETAIL_SOFTMAXES_ROWS_COMPILED(EXTERN, T) \
    XGRAD_DETAIL_SOFTMAX_ROWS_COMPILED(EXTERN, false, T) XGRAD_DETAIL_SOFTMAX_ROWS_COMPILED(EXTERN, true, T)
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_SOFTMAXES_ROWS_COMPILED)
#undef XGRAD_DETAIL_SOFTMAXES_ROWS_COMPILED
#undef XGRAD_DETAIL_SOFTMAX_ROWS_COMPILED
}  // namespace xgrad
