// The softmax kernels down columns, forward and backward: the softmax runs down each column of a
// block, one column per SIMD lane, so max and sum are elementwise, never across lanes. Used along
// any axis but the last (ops/softmax.hpp) and by the fused attention, which keeps its scores
// transposed (queries are lanes). Along rows: kernels/softmax.hpp, which includes this file.
// What a column whose every score is -inf gives is the caller's choice (EmptyLine): NaN as
// PyTorch's softmax, or zeros (a fully masked row: xgrad's masked softmax).
//
//   softmax:      y = exp(s − max) / Σ exp(s − max)       dS = factor · Y ⊙ (dY − Σ dY ⊙ Y)
//   log_softmax:  y = s − max − log Σ exp(s − max)        dS = dY − exp(Y) · Σ dY
// A backward writes out = beta · out + dS with beta 0 (overwrite, out is never read) or 1.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad::kernels {

// What a line whose every score is -inf gives.
enum class EmptyLine { nan, zeros };

// f(chunk, v0, part) for the vectors [v0, v0 + chunk) of `width` lanes, chunk an integral_constant:
// 4 at a time, then 2, then 1, so that a pass down the columns carries `chunk` independent chains;
// part: the lanes used in the chunk's last vector (W but for a partial last one).
template <std::size_t W, std::size_t Chunk = 4, class F>
[[gnu::always_inline]] inline void for_each_column_chunk(std::size_t width, F f) {
    const std::size_t vectors = (width + W - 1) / W, tail = width - (vectors - 1) * W;
    std::size_t v0 = 0;
    for (; v0 + Chunk <= vectors; v0 += Chunk) f(std::integral_constant<std::size_t, Chunk>{}, v0, v0 + Chunk == vectors ? tail : W);
    if constexpr (Chunk > 1) {
        if (v0 < vectors)
            for_each_column_chunk<W, Chunk / 2>(width - v0 * W, [&](auto c, std::size_t v, std::size_t part) { f(c, v0 + v, part); });
    }
}

// The vector c of a chunk at `at` (its last one holds `part` lanes).
template <std::size_t C, Real T>
[[gnu::always_inline]] inline simd::Vec<T> load_lanes(const T* at, std::size_t c, std::size_t part, T fill = T(0)) {
    return c + 1 < C || part == simd::lanes<T> ? simd::Vec<T>::load_unaligned(at) : simd::load_part(at, part, fill);
}
template <std::size_t C, Real T>
[[gnu::always_inline]] inline void store_lanes(T* at, simd::Vec<T> v, std::size_t c, std::size_t part) {
    if (c + 1 < C || part == simd::lanes<T>) v.store_unaligned(at);
    else simd::store_part(at, v, part);
}

// log of each lane with std::log: once per column group, so it costs nothing against simd::log.
template <Real T>
simd::Vec<T> lanewise_log(simd::Vec<T> v) {
    alignas(64) T lanes[simd::lanes<T>];
    v.store_aligned(lanes);
    for (T& x : lanes) x = std::log(x);
    return simd::Vec<T>::load_aligned(lanes);
}

// Softmax (or, Log, log_softmax) down each of the first `width` columns of the (n, ld) block st
// in place (n ≥ 1 rows, one per key).
template <bool Log = false, Real T>
void softmax_columns(T* st, std::size_t n, std::size_t ld, std::size_t width, EmptyLine empty) {
    using batch = simd::Vec<T>;
    constexpr std::size_t W = simd::lanes<T>;
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    for_each_column_chunk<W>(width, [&](auto chunk, std::size_t v0, std::size_t part) {
        constexpr std::size_t C = decltype(chunk)::value;
        T* col = st + v0 * W;
        std::array<batch, C> max, sum;
        for (std::size_t c = 0; c < C; ++c) max[c] = batch(neg_inf), sum[c] = batch(T(0));
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < C; ++c) max[c] = xsimd::max(max[c], load_lanes<C>(col + j * ld + c * W, c, part, neg_inf));
        // zeros for an all -inf column: exp(-inf - 0) = 0 and sum 0, then 0 · 0 (a NaN there: NaN)
        if (empty == EmptyLine::zeros)
            for (std::size_t c = 0; c < C; ++c) max[c] = xsimd::select(max[c] == batch(neg_inf), batch(T(0)), max[c]);
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < C; ++c) {
                T* at = col + j * ld + c * W;
                const batch e = xsimd::exp(load_lanes<C>(at, c, part, neg_inf) - max[c]);
                if constexpr (!Log) store_lanes<C>(at, e, c, part);
                sum[c] += e;
            }
        for (std::size_t c = 0; c < C; ++c) {
            if constexpr (Log) sum[c] = max[c] + lanewise_log(sum[c]);
            else if (empty == EmptyLine::zeros) sum[c] = xsimd::select(sum[c] == batch(T(0)), batch(T(0)), batch(T(1)) / sum[c]);
            else sum[c] = batch(T(1)) / sum[c];
        }
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < C; ++c) {
                T* at = col + j * ld + c * W;
                const batch v = load_lanes<C>(at, c, part);
                store_lanes<C>(at, Log ? v - sum[c] : v * sum[c], c, part);
            }
    });
}

// The backward of softmax_columns down the first `width` columns of (n, ld) blocks:
// out = beta · out + dS, dS as at the top, the sums down each column; out may be dY itself.
template <bool Log = false, Real T>
void softmax_backward_columns(const T* Y, const T* dY, T* out, std::size_t n, std::size_t ld, std::size_t width,
                              T factor, T beta = T(0)) {
    using batch = simd::Vec<T>;
    constexpr std::size_t W = simd::lanes<T>;
    for_each_column_chunk<W>(width, [&](auto chunk, std::size_t v0, std::size_t part) {
        constexpr std::size_t C = decltype(chunk)::value;
        std::array<batch, C> sum;  // Σ dY ⊙ Y (softmax) or Σ dY (log_softmax)
        for (std::size_t c = 0; c < C; ++c) sum[c] = batch(T(0));
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < C; ++c) {
                const std::size_t at = j * ld + (v0 + c) * W;
                const batch dy = load_lanes<C>(dY + at, c, part);
                sum[c] = Log ? sum[c] + dy : xsimd::fma(dy, load_lanes<C>(Y + at, c, part), sum[c]);
            }
        const batch vfactor(factor);
        for (std::size_t j = 0; j < n; ++j)
            for (std::size_t c = 0; c < C; ++c) {
                const std::size_t at = j * ld + (v0 + c) * W;
                const batch y = load_lanes<C>(Y + at, c, part), dy = load_lanes<C>(dY + at, c, part);
                batch ds = Log ? dy - xsimd::exp(y) * sum[c] : y * (dy - sum[c]) * vfactor;
                if (beta != T(0)) ds += load_lanes<C>(out + at, c, part);
                store_lanes<C>(out + at, ds, c, part);
            }
    });
}

}  // namespace xgrad::kernels

// Compiled once in libxgrad (xgrad/core/compiled.hpp), softmax and log-softmax.
namespace xgrad {
#define XGRAD_DETAIL_SOFTMAX_COLUMNS_COMPILED(EXTERN, LOG, T)                                                     \
    EXTERN template void kernels::softmax_columns<LOG, T>(T*, std::size_t, std::size_t, std::size_t,             \
                                                          kernels::EmptyLine);                                    \
    EXTERN template void kernels::softmax_backward_columns<LOG, T>(const T*, const T*, T*, std::size_t,          \
                                                                   std::size_t, std::size_t, T, T);
#define XGRAD_DETAIL_SOFTMAXES_COLUMNS_COMPILED(EXTERN, T) \
    XGRAD_DETAIL_SOFTMAX_COLUMNS_COMPILED(EXTERN, false, T) XGRAD_DETAIL_SOFTMAX_COLUMNS_COMPILED(EXTERN, true, T)
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_SOFTMAXES_COLUMNS_COMPILED)
#undef XGRAD_DETAIL_SOFTMAXES_COLUMNS_COMPILED
#undef XGRAD_DETAIL_SOFTMAX_COLUMNS_COMPILED
}  // namespace xgrad
