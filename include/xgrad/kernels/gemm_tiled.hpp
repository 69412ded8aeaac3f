// xgrad's own GEMM kernel, xsimd register tiles: C (m,n) = alpha · op(A) op(B) + beta · C on
// row-major matrices with leading dimensions. A tile of up to 8 rows × up to 4 vectors of columns
// accumulates R(i,p) · X[p, j..] over p in registers (each element of R broadcast, rows of X
// contiguous), then updates C once. R, X are op(A), op(B), or op(B)^T, op(A)^T computing C^T,
// whichever packs less (gemm below). Each C element's sum runs over p in order, whichever tile,
// row block or thread block computes it.
// A GEMM back end of kernels::gemm (gemm.hpp, gemm_backends.hpp) in AVX-512 builds; the
// fused attention calls product() directly on operands it lays out itself.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/simd.hpp"
#include "xgrad/kernels/gemv.hpp"

namespace xgrad::kernels::tiled {

using simd::lanes, simd::load_part, simd::store_part, simd::Vec;
// 32 vector registers with AVX-512, 16 below it: the tiles are sized to keep accumulators in them.
inline constexpr bool many_registers = Vec<float>::size * sizeof(float) >= 64;

// alpha · sum + beta · c + bias, the one formula of every update of C (whole or partial vectors,
// whichever tile): c is only read when Accumulate (beta ≠ 0: BLAS semantics), bias only with Bias.
template <bool Accumulate, bool Bias, class T>
[[gnu::always_inline]] inline Vec<T> updated(Vec<T> sum, T alpha, T beta, Vec<T> c, Vec<T> bias) {
    if constexpr (!Accumulate) return Bias ? xsimd::fma(sum, Vec<T>(alpha), bias) : sum * alpha;
    else return xsimd::fma(sum, Vec<T>(alpha), Bias ? xsimd::fma(c, Vec<T>(beta), bias) : c * beta);
}

// c[0, count) = alpha · sum + beta · c + bias[0, count) (bias null: none), count ≤ lanes.
template <class T>
[[gnu::always_inline]] inline void update(T* c, Vec<T> sum, std::size_t count, T alpha, T beta, const T* bias) {
    const bool whole = count == lanes<T>;
    const auto load = [&](const T* p) { return whole ? Vec<T>::load_unaligned(p) : load_part(p, count); };
    const Vec<T> zero(T(0));
    if (beta == T(0))
        sum = bias ? updated<false, true>(sum, alpha, beta, zero, load(bias)) : updated<false, false>(sum, alpha, beta, zero, zero);
    else
        sum = bias ? updated<true, true>(sum, alpha, beta, load(c), load(bias)) : updated<true, false>(sum, alpha, beta, load(c), zero);
    if (whole) sum.store_unaligned(c);
    else store_part(c, sum, count);
}

// ---- Packing: X stored transposed, X(p, j) = x[p + j·ldx], copied into packed[p·ld + j] ----

#if defined(__AVX512F__)
// The block of rows × cols (each at most 16 floats or 8 doubles) at x, rows ldx apart, transposed
// into out, rows ld apart: out row c < cols gets column c of the block in lanes [0, rows), zeros
// after. Nothing outside the block is read, no out row past cols written. Pairs of rows are
// interleaved, then pairs of pairs, then 128-bit lanes gathered in two rounds. The loops are
// unrolled: with constant indices r and t stay in registers (not unrolled, 1.5x slower).
inline void transpose_block(const float* x, std::size_t ldx, std::size_t rows, std::size_t cols, float* out,
                            std::size_t ld) {
    const auto mask = simd::first_lanes(cols);
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (std::size_t i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(mask, x + i * ldx) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 2) t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
#pragma GCC unroll 16
    for (int i = 0; i < 16; i += 4)
#pragma GCC unroll 16
        for (int c = 0; c < 2; ++c) {
            const __m512d lo = _mm512_castps_pd(t[i + c]), hi = _mm512_castps_pd(t[i + 2 + c]);
            r[i + 2 * c] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, hi));      // column 4L + 2c of rows i..i+3
            r[i + 2 * c + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, hi));  // column 4L + 2c + 1
        }
    const auto store = [&](std::size_t c, __m512 v) {
        if (c < cols) _mm512_storeu_ps(out + c * ld, v);
    };
#pragma GCC unroll 16
    for (std::size_t c = 0; c < 4; ++c) {  // r[4g + c]: rows 4g..4g+3, column 4L + c in lane L
        const __m512 even01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), odd01 = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD);
        const __m512 even23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88),
                     odd23 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        store(c, _mm512_shuffle_f32x4(even01, even23, 0x88));
        store(8 + c, _mm512_shuffle_f32x4(even01, even23, 0xDD));
        store(4 + c, _mm512_shuffle_f32x4(odd01, odd23, 0x88));
        store(12 + c, _mm512_shuffle_f32x4(odd01, odd23, 0xDD));
    }
}
inline void transpose_block(const double* x, std::size_t ldx, std::size_t rows, std::size_t cols, double* out,
                            std::size_t ld) {
    const auto mask = static_cast<__mmask8>(simd::first_lanes(cols));
    __m512d r[8], t[8];
#pragma GCC unroll 16
    for (std::size_t i = 0; i < 8; ++i) r[i] = i < rows ? _mm512_maskz_loadu_pd(mask, x + i * ldx) : _mm512_setzero_pd();
#pragma GCC unroll 16
    for (int i = 0; i < 8; i += 2) t[i] = _mm512_unpacklo_pd(r[i], r[i + 1]), t[i + 1] = _mm512_unpackhi_pd(r[i], r[i + 1]);
    const auto store = [&](std::size_t c, __m512d v) {
        if (c < cols) _mm512_storeu_pd(out + c * ld, v);
    };
#pragma GCC unroll 16
    for (std::size_t c = 0; c < 2; ++c) {  // t[2g + c]: rows 2g, 2g+1, column 2L + c in lane L
        const __m512d even01 = _mm512_shuffle_f64x2(t[c], t[2 + c], 0x88), odd01 = _mm512_shuffle_f64x2(t[c], t[2 + c], 0xDD);
        const __m512d even23 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0x88),
                      odd23 = _mm512_shuffle_f64x2(t[4 + c], t[6 + c], 0xDD);
        store(c, _mm512_shuffle_f64x2(even01, even23, 0x88));
        store(4 + c, _mm512_shuffle_f64x2(even01, even23, 0xDD));
        store(2 + c, _mm512_shuffle_f64x2(odd01, odd23, 0x88));
        store(6 + c, _mm512_shuffle_f64x2(odd01, odd23, 0xDD));
    }
}
#endif

// packed[p·ld + j] = x[p + j·ldx] for p < k, j < cols, by blocks of lanes × lanes transposed in
// registers with AVX-512 (which also write zeros in packed up to cols rounded up to whole
// vectors), one element at a time without.
template <class T>
void pack_transposed(const T* x, std::size_t ldx, std::size_t k, std::size_t cols, T* packed, std::size_t ld) {
#if defined(__AVX512F__)
    if constexpr (simd::is_avx512<T>) {  // the blocks are one register wide
        constexpr std::size_t B = lanes<T>;
        for (std::size_t j = 0; j < cols; j += B)
            for (std::size_t p = 0; p < k; p += B)
                transpose_block(x + j * ldx + p, ldx, std::min(B, cols - j), std::min(B, k - p), packed + p * ld + j, ld);
        return;
    }
#endif
    for (std::size_t j = 0; j < cols; ++j)
        for (std::size_t p = 0; p < k; ++p) packed[p * ld + j] = x[p + j * ldx];
}

// C (m,n) = alpha · Tᵀ + beta · C (+ bias (n) on every row), from T (n,m) at t with rows ldt apart:
// blocks of lanes × lanes transposed (in registers with AVX-512), then each row of C updated a
// vector at a time.
template <class T>
void add_transposed(const T* t, std::size_t ldt, std::size_t m, std::size_t n, T alpha, T beta, const T* bias, T* c,
                    std::size_t ldc) {
    constexpr std::size_t W = lanes<T>;
    alignas(64) std::array<T, W * W> block;  // block[i·W + j] = T(j0 + j, i0 + i)
    for (std::size_t j0 = 0; j0 < n; j0 += W)
        for (std::size_t i0 = 0; i0 < m; i0 += W) {
            const std::size_t rows = std::min(W, n - j0), cols = std::min(W, m - i0);
#if defined(__AVX512F__)
            if constexpr (simd::is_avx512<T>) transpose_block(t + j0 * ldt + i0, ldt, rows, cols, block.data(), W);
            else
#endif
                for (std::size_t j = 0; j < rows; ++j)
                    for (std::size_t i = 0; i < cols; ++i) block[i * W + j] = t[(j0 + j) * ldt + i0 + i];
            for (std::size_t i = 0; i < cols; ++i)
                update(c + (i0 + i) * ldc + j0, Vec<T>::load_aligned(block.data() + i * W), rows, alpha, beta,
                       bias ? bias + j0 : nullptr);
        }
}

// ---- The tiles: C' (rows, cols) = alpha · R (rows,k) · X (k,cols) + beta · C' ----
// R is read one element at a time (broadcast), X one row at a time (vectors). C' is C itself, or
// C transposed when that spares packing a large operand (see gemm below).
// Written with designated initializers: Plan<T>{.rows = n, .cols = L, .k = D, .r = a, .r_row = lda,
// .c = c, .ldc = ldc} (alpha 1, beta 0, no bias unless given).
template <class T>
struct Plan {
    std::size_t rows = 0, cols = 0, k = 0;  // of C' (rows, cols), summed over k
    const T* r = nullptr;                   // R(i, p) = r[i·r_row + p·r_step]
    std::size_t r_row = 0, r_step = 1;
    T alpha = T(1), beta = T(0);
    T* c = nullptr;  // C'(i, j) = c[i·ldc + j]
    std::size_t ldc = 0;
    const T* bias = nullptr;  // C'(i, j) += bias[j] (null: none)
};

inline constexpr std::size_t max_nv = many_registers ? 4 : 2;  // vectors of columns of a tile
template <class T>
inline constexpr std::size_t panel_cols = max_nv * lanes<T>;  // columns of X a panel of tiles covers
// Rows of a tile of NV vectors: at most 24 (12) accumulators beside X's row, and at most 8 rows,
// whose pointers into R must stay in general-purpose registers.
template <std::size_t NV>
inline constexpr std::size_t tile_rows = std::min<std::size_t>(8, (many_registers ? 24 : 12) / NV);

// A whole tile's update, C' (r, v·lanes + j) = alpha · acc[r][v] (+ beta · C') (+ bias), without
// a branch per vector (Accumulate: beta ≠ 0, so C' is read).
template <bool Accumulate, bool Bias, class T, std::size_t MR, std::size_t NV>
[[gnu::always_inline]] inline void store_whole(const std::array<std::array<Vec<T>, NV>, MR>& acc, T* c, std::size_t ldc,
                                               T alpha, T beta, const T* bias) {
    constexpr std::size_t W = lanes<T>;
#pragma GCC unroll 8
    for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NV; ++v) {
            T* out = c + r * ldc + v * W;
            const Vec<T> old = Accumulate ? Vec<T>::load_unaligned(out) : Vec<T>(T(0));
            const Vec<T> b = Bias ? Vec<T>::load_unaligned(bias + v * W) : Vec<T>(T(0));
            updated<Accumulate, Bias>(acc[r][v], alpha, beta, old, b).store_unaligned(out);
        }
}

// The tiles of rows [first, last) of one panel: each `rows` ≤ MR rows of R (missing ones repeat
// the last, unstored) times NV vectors of X holding `cols` columns (the last vector partial unless
// Full). Row p of X from the panel's first column on is at x + p·ldx. The row loop is inside, so
// the set-up is paid once per panel, and a whole tile's update has no branch per vector (with one
// call per tile, tiny's k = 12 weight gradients took 1.5x their FMA time; this takes 15% off).
// Never inlined: inside a larger function g++ may spill the row pointers (2x slower in float64).
template <class T, std::size_t MR, std::size_t NV, bool Full>
[[gnu::noinline]] void tiles(const Plan<T>& g, const T* x, std::size_t ldx, std::size_t j0, std::size_t cols,
                             std::size_t first, std::size_t last) {
    constexpr std::size_t W = lanes<T>;
    const std::size_t k = g.k, r_step = g.r_step, r_row = g.r_row, ldc = g.ldc;  // locals: no aliasing with acc
    const T alpha = g.alpha, beta = g.beta;
    const T* bias = g.bias ? g.bias + j0 : nullptr;
    for (std::size_t i0 = first; i0 < last; i0 += MR) {
        const std::size_t rows = std::min(MR, last - i0);
        // acc only by value and constant indices (loops unrolled: no fill(), which g++ may call
        // out of line), else g++ keeps it in memory and stores it at every p
        std::array<std::array<Vec<T>, NV>, MR> acc;
#pragma GCC unroll 8
        for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = Vec<T>(T(0));
        std::array<const T*, MR> r_of;
        for (std::size_t r = 0; r < MR; ++r) r_of[r] = g.r + (i0 + std::min(r, rows - 1)) * r_row;
        for (std::size_t p = 0, step = 0; p < k; ++p, step += r_step) {
            const T* x_row = x + p * ldx;
            std::array<Vec<T>, NV> xv;
            for (std::size_t v = 0; v < NV; ++v)
                xv[v] = Full || (v + 1) * W <= cols ? Vec<T>::load_unaligned(x_row + v * W)
                                                    : load_part(x_row + v * W, cols - v * W);
#pragma GCC unroll 8
            for (std::size_t r = 0; r < MR; ++r) {
                const Vec<T> a(r_of[r][step]);
                for (std::size_t v = 0; v < NV; ++v) acc[r][v] = xsimd::fma(a, xv[v], acc[r][v]);
            }
        }
        // C' (i0 + r, j0 + j) = alpha · acc + beta · C' + bias (j0 + j)
        T* c = g.c + i0 * ldc + j0;
        if (Full && rows == MR) {  // a whole tile: the update's choices made once, not per vector
            if (beta == T(0)) bias ? store_whole<false, true>(acc, c, ldc, alpha, beta, bias)
                              : store_whole<false, false>(acc, c, ldc, alpha, beta, bias);
            else bias ? store_whole<true, true>(acc, c, ldc, alpha, beta, bias)
                      : store_whole<true, false>(acc, c, ldc, alpha, beta, bias);
            continue;
        }
#pragma GCC unroll 8
        for (std::size_t r = 0; r < MR; ++r)
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) {
                if (r >= rows || v * W >= cols) continue;
                update(c + r * ldc + v * W, acc[r][v], std::min(W, cols - v * W), alpha, beta,
                       bias ? bias + v * W : nullptr);
            }
    }
}

// The tiles of rows [first, last) of one panel of `cols` ≤ NV·lanes columns, NV the fewest vectors
// that hold them.
template <class T, std::size_t NV = max_nv>
void panel(const Plan<T>& g, const T* x, std::size_t ldx, std::size_t j0, std::size_t cols, std::size_t first,
           std::size_t last) {
    if constexpr (NV > 1)
        if (cols <= (NV - 1) * lanes<T>) return panel<T, NV - 1>(g, x, ldx, j0, cols, first, last);
    constexpr std::size_t MR = tile_rows<NV>;
    if (last - first == 1) {  // one row (a single query's P·V): not MR rows computed for one
        if (cols == NV * lanes<T>) tiles<T, 1, NV, true>(g, x, ldx, j0, cols, first, last);
        else tiles<T, 1, NV, false>(g, x, ldx, j0, cols, first, last);
    } else if (cols == NV * lanes<T>) tiles<T, MR, NV, true>(g, x, ldx, j0, cols, first, last);
    else tiles<T, MR, NV, false>(g, x, ldx, j0, cols, first, last);
}

// Rows of R per block: a block's rows × k elements (about 256 KB) stay in L2 while every panel of
// X passes over them. A multiple of the tile heights (6 and 8).
template <class T>
std::size_t block_rows(std::size_t k) {
    return std::max<std::size_t>(24, (std::size_t(256) << 10) / (k * sizeof(T)) / 24 * 24);
}

// C' = alpha · R · X + beta · C' (+ bias) for the plan g: R in blocks of rows that stay in L2,
// each block against every panel of max_nv vectors of X's columns; x_of(q) gives panel q's
// (first row's first column, row stride).
template <class T, class PanelOf>
void product_by_panels(const Plan<T>& g, PanelOf x_of) {
    constexpr std::size_t width = panel_cols<T>;
    const std::size_t panels = (g.cols + width - 1) / width, rows_per_block = block_rows<T>(g.k);
    for (std::size_t first = 0; first < g.rows; first += rows_per_block)
        for (std::size_t q = 0; q < panels; ++q) {
            const std::size_t j0 = q * width, cols = std::min(width, g.cols - j0);
            const auto [x, ldx] = x_of(q);
            panel(g, x, ldx, j0, cols, first, std::min(g.rows, first + rows_per_block));
        }
}

// The same with X (g.k, g.cols) in place: row p at x + p·ldx, contiguous. For callers that lay
// out both operands themselves (the fused attention); k ≥ 1. One column of C' (a single query's
// scores) is a dot product per row of R, against X's column gathered once, not a tile's lane of eight.
template <class T>
void product(const Plan<T>& g, const T* x, std::size_t ldx) {
    if (g.cols > 1 || g.r_step != 1)
        return product_by_panels(g, [&](std::size_t q) { return std::pair{x + q * panel_cols<T>, ldx}; });
    thread_local std::vector<T> column;
    column.resize(g.k);
    for (std::size_t p = 0; p < g.k; ++p) column[p] = x[p * ldx];
    for (std::size_t i = 0; i < g.rows; ++i) {
        T* out = g.c + i * g.ldc;
        T v = g.alpha * kernels::detail::dot_streaming(column.data(), g.r + i * g.r_row, g.k);
        if (g.beta != T(0)) v += g.beta * *out;
        *out = g.bias ? v + g.bias[0] : v;
    }
}

// C (m,n) = alpha · op(A) op(B) + beta · C (+ bias (n) on every row when not null) with k ≥ 1;
// k = 0 is the caller's. The tiles need X's rows contiguous. X = op(B) has them when B is not
// transposed. Else C^T = op(B)^T op(A)^T has them in X = op(A)^T when A is transposed, or it is
// cheaper to pack op(A)^T when A has much fewer rows than B: then C^T goes to a buffer and is
// added to C transposed at the end (with the bias). Otherwise X = op(B) is packed. R is taken in
// blocks of rows that stay in L2. The buffers are thread-local, grow once and are reused.
template <class T>
void gemm(bool a_trans, bool b_trans, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc, const T* bias = nullptr) {
    // packing A^T (m·k) plus the pass over C (m·n) against packing B (n·k), when B is too large
    // to pack cheaply (below 128 KB, packing it and tiles of whole vectors of C's rows measured
    // faster, e.g. (12,300,100) float 6.4 -> 5.5 us, and (6,300,100) 6.3 -> 3.8)
    const bool large_b = n * k * sizeof(T) > (std::size_t(128) << 10);
    const bool transposed = b_trans && (a_trans || (large_b && m * (k + n) < n * k));
    thread_local std::vector<T> packed, c_transposed;
    Plan<T> g;
    const T* x;  // X (k, cols): X(p, j) = x[p·x_row + j·x_col]
    std::size_t x_row, x_col;
    if (!transposed) {
        g = {.rows = m, .cols = n, .k = k, .r = a, .r_row = a_trans ? 1 : lda, .r_step = a_trans ? lda : 1,
             .alpha = alpha, .beta = beta, .c = c, .ldc = ldc, .bias = bias};
        x = b, x_row = b_trans ? 1 : ldb, x_col = b_trans ? ldb : 1;
    } else {
        if (c_transposed.size() < n * m) c_transposed.resize(n * m);
        g = {.rows = n, .cols = m, .k = k, .r = b, .r_row = b_trans ? ldb : 1, .r_step = b_trans ? 1 : ldb,
             .c = c_transposed.data(), .ldc = m};
        x = a, x_row = a_trans ? lda : 1, x_col = a_trans ? 1 : lda;
    }
    // X packed whole, panel after panel (k, panel_cols), when its rows are not contiguous, or when
    // they span more than L2 and many row tiles read them: packed, a panel is read sequentially
    // (measured 1.5-2x faster on (1536,512,1024) TN, whose rows of X, 4 KB apart, share cache sets)
    constexpr std::size_t width = panel_cols<T>;
    const std::size_t panels = (g.cols + width - 1) / width;
    const bool pack = x_col != 1 || (g.rows >= 64 && k * x_row * sizeof(T) > (std::size_t(512) << 10));
    if (pack) {
        if (packed.size() < panels * k * width) packed.resize(panels * k * width);
        for (std::size_t q = 0; q < panels; ++q) {
            const std::size_t j0 = q * width, cols = std::min(width, g.cols - j0);
            T* out = packed.data() + q * k * width;
            if (x_col != 1) pack_transposed(x + j0 * x_col, x_col, k, cols, out, width);  // x_row is 1 here
            else
                for (std::size_t p = 0; p < k; ++p) std::copy_n(x + p * x_row + j0, cols, out + p * width);
        }
    }
    if (pack) product_by_panels(g, [&](std::size_t q) { return std::pair{packed.data() + q * k * width, width}; });
    else product(g, x, x_row);
    if (transposed) add_transposed(c_transposed.data(), m, m, n, alpha, beta, bias, c, ldc);
}

}  // namespace xgrad::kernels::tiled

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_TILED_COMPILED(EXTERN, T)                                                                     \
    EXTERN template void kernels::tiled::product<T>(const kernels::tiled::Plan<T>&, const T*, std::size_t);       \
    EXTERN template void kernels::tiled::pack_transposed<T>(const T*, std::size_t, std::size_t, std::size_t, T*,   \
                                                            std::size_t);                                          \
    EXTERN template void kernels::tiled::gemm<T>(bool, bool, std::size_t, std::size_t, std::size_t, T, const T*,   \
                                                 std::size_t, const T*, std::size_t, T, T*, std::size_t, const T*);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_TILED_COMPILED)
#undef XGRAD_DETAIL_TILED_COMPILED
}  // namespace xgrad
