// The scores of one attention head and the masks applied to them, in the two layouts the attention
// paths keep them (nn/attention/paths.hpp); the reference path composes plain ops instead.
//   rows:    S (L, S'), a query per row, keys along it: attention_weights and inspection; its
//            softmax (softmax.hpp: softmax_rows) applies the masks in registers as it reads them
//   columns: Sᵀ (S', ld), a key per row, the queries along it as SIMD lanes: the fused attention
// A head's Q is (L, D) and K' its live keys (S', D), each row-major with rows ldq and ldk apart.
// The masks are a ScoreMasks (score_masks.hpp) over every head's score rows, bh·L + i for query i
// of head bh; only the keys of a KeyRange are stored or read.
//
// Offers: scores_rows (its masks: RowMasks, score_masks.hpp), scores_columns and apply_masks_columns.
#pragma once
#include <cstddef>
#include <limits>

#include "xgrad/core/compiled.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"

namespace xgrad::kernels {

// ---- rows ----

// S (L, S') = scale · Q (L, D) · K'ᵀ (D, S'): query i's scores at s + i·lds.
template <Real T>
void scores_rows(const T* q, std::size_t ldq, const T* k, std::size_t ldk, std::size_t L, std::size_t keys,
                 std::size_t D, T scale, T* s, std::size_t lds) {
    gemm(Op::none, Op::trans, L, keys, D, scale, q, ldq, k, ldk, T(0), s, lds);
}

// ---- columns ----

// Sᵀ (S', L) = scale · K' (S', D) · Qᵀ (D, L) from Qᵀ packed (D, ld) (tiled::pack_transposed): key
// j's scores at st + j·ld.
template <Real T>
void scores_columns(const T* k, std::size_t ldk, const T* qt, std::size_t keys, std::size_t L, std::size_t D, T scale,
                    T* st, std::size_t ld) {
    tiled::product(tiled::Plan<T>{.rows = keys, .cols = L, .k = D, .r = k, .r_row = ldk, .alpha = scale, .c = st, .ldc = ld},
                   qt, ld);
}

// Sᵀ rows j of the keys `keys`, lanes i < L, of the head whose score rows start at `first`:
// + additive(i, j), then -inf where ignore(i, j) (stored, and the causal rule: query i ignores the
// keys from keep(i), which grows with i); the ignore masks only when the range has holes.
// A mask row serving all L queries of the head (a key_padding_mask) is a scalar per key row; other
// masks are read element by element.
template <Real T>
void apply_masks_columns(const ScoreMasks<T>& masks, std::size_t first, std::size_t L, KeyRange keys, T* st,
                         std::size_t ld) {
    constexpr T neg_inf = -std::numeric_limits<T>::infinity();
    const auto apply = [&](const MaskRows<T>& m, auto combine) {
        if (!m.used) return;
        if (m.group % L == 0) {
            const T* row = m.row(first);
            for (std::size_t j = keys.begin; j < keys.end; ++j) {
                T* s = st + (j - keys.begin) * ld;
                for (std::size_t i = 0; i < L; ++i) s[i] = combine(s[i], row[j]);
            }
        } else {
            for (std::size_t i = 0; i < L; ++i) {
                const T* row = m.row(first + i);
                for (std::size_t j = keys.begin; j < keys.end; ++j) {
                    T& s = st[(j - keys.begin) * ld + i];
                    s = combine(s, row[j]);
                }
            }
        }
    };
    apply(masks.additive, [](T s, T a) { return s + a; });
    if (!keys.holes) return;
    apply(masks.ignore, [](T s, T ignored) { return ignored != T(0) ? neg_inf : s; });
    if (masks.causal.used) {  // key j is ignored by the queries i with keep(i) <= j
        const std::size_t S = masks.width, i0 = first % masks.queries();
        for (std::size_t j = keys.begin; j < keys.end; ++j)
            for (std::size_t i = 0; i < L && masks.causal.keep(i0 + i, S) <= j; ++i) st[(j - keys.begin) * ld + i] = neg_inf;
    }
}

}  // namespace xgrad::kernels

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SCORES_COMPILED(EXTERN, T)                                                                   \
    EXTERN template void kernels::scores_rows<T>(const T*, std::size_t, const T*, std::size_t, std::size_t,      \
                                                 std::size_t, std::size_t, T, T*, std::size_t);                   \
    EXTERN template void kernels::scores_columns<T>(const T*, std::size_t, const T*, std::size_t, std::size_t,   \
                                                    std::size_t, T, T*, std::size_t);                             \
    EXTERN template void kernels::apply_masks_columns<T>(const kernels::ScoreMasks<T>&, std::size_t, std::size_t, \
                                                         kernels::KeyRange, T*, std::size_t);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_SCORES_COMPILED)
#undef XGRAD_DETAIL_SCORES_COMPILED
}  // namespace xgrad
