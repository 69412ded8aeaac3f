// xgrad's own GEMM kernel, xsimd register tiles: C (m,n) = alpha · op(A) op(B) + beta · C on
// row-major matrices with leading dimensions. C is computed in panels of rows_nv vectors of
// columns; a tile of rows_mr rows accumulates a(i,p) · B[p, j..] over p in registers (each element
// of op(A) broadcast, rows of op(B) contiguous), then updates C once. B not transposed is read in
// place; B transposed is copied panel by panel into a (k, panel) buffer first. Each C element's sum
// runs over p in order, whichever tile or thread block computes it.
// Used by blas::gemm for mid-size products on AVX-512 builds (preferred() below).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

namespace xgrad::blas::small {

template <class T>
using Vec = xsimd::batch<T>;
template <class T>
inline constexpr std::size_t lanes = Vec<T>::size;
// 32 vector registers with AVX-512, 16 below it: the tiles are sized to keep accumulators in them.
inline constexpr bool many_registers = Vec<float>::size * sizeof(float) >= 64;

template <class T>
struct Operands {
    bool a_trans;
    std::size_t m, n, k;
    T alpha;
    const T* a;
    std::size_t lda;
    const T* b;
    std::size_t ldb;
    T beta;
    T* c;
    std::size_t ldc;
    // op(A)(i, p): A stored (m,k) or, transposed, (k,m)
    const T* a_at(std::size_t i, std::size_t p) const { return a_trans ? a + p * lda + i : a + i * lda + p; }
};

// The `count` (≤ lanes) elements at p, zeros after them, reading nothing past them: a masked load
// where the instruction set has one, else through a buffer when count < lanes.
template <class T>
Vec<T> load_part(const T* p, std::size_t count) {
#if defined(__AVX512F__)
    if constexpr (lanes<T> * sizeof(T) == 64) {
        const auto mask = static_cast<__mmask16>((1u << count) - 1u);
        if constexpr (std::is_same_v<T, float>) return _mm512_maskz_loadu_ps(mask, p);
        else return _mm512_maskz_loadu_pd(static_cast<__mmask8>(mask), p);
    }
#endif
    if (count == lanes<T>) return Vec<T>::load_unaligned(p);
    alignas(64) std::array<T, lanes<T>> buffer{};
    std::copy(p, p + count, buffer.begin());
    return Vec<T>::load_aligned(buffer.data());
}

// c[0, count) = alpha · sum + beta · c, where c is only read when beta ≠ 0 (BLAS semantics).
template <class T>
void update(T* c, Vec<T> sum, std::size_t count, T alpha, T beta) {
    alignas(64) std::array<T, lanes<T>> buffer;
    if (count == lanes<T>) {
        sum = beta == T(0) ? sum * alpha : xsimd::fma(sum, Vec<T>(alpha), Vec<T>::load_unaligned(c) * beta);
        sum.store_unaligned(c);
        return;
    }
    sum.store_aligned(buffer.data());
    for (std::size_t j = 0; j < count; ++j) c[j] = beta == T(0) ? alpha * buffer[j] : alpha * buffer[j] + beta * c[j];
}

// ---- B not transposed: C[i, j..] += a(i,p) · B[p, j..] ----

inline constexpr std::size_t rows_mr = 6;                          // rows of a tile
inline constexpr std::size_t rows_nv = many_registers ? 4 : 2;     // vectors of columns of a tile

// One tile at (i0, j0): `rows` ≤ rows_mr rows (missing ones repeat the last row, unstored) and NV
// vectors holding `cols` columns, the last vector possibly partial. Row p of op(B) from column j0
// on is at b_panel + p·ldb.
template <class T, std::size_t NV, bool Full>
void rows_tile(const Operands<T>& g, const T* b_panel, std::size_t ldb, std::size_t i0, std::size_t j0, std::size_t rows,
               std::size_t cols) {
    constexpr std::size_t W = lanes<T>;
    std::array<std::array<Vec<T>, NV>, rows_mr> acc;
    for (auto& row : acc) row.fill(Vec<T>(T(0)));
    std::array<std::size_t, rows_mr> row_of;
    for (std::size_t r = 0; r < rows_mr; ++r) row_of[r] = i0 + std::min(r, rows - 1);
    for (std::size_t p = 0; p < g.k; ++p) {
        const T* b_row = b_panel + p * ldb;
        std::array<Vec<T>, NV> b;
        for (std::size_t v = 0; v < NV; ++v)
            b[v] = Full || (v + 1) * W <= cols ? Vec<T>::load_unaligned(b_row + v * W) : load_part(b_row + v * W, cols - v * W);
        for (std::size_t r = 0; r < rows_mr; ++r) {
            const Vec<T> a(*g.a_at(row_of[r], p));
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = xsimd::fma(a, b[v], acc[r][v]);
        }
    }
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t v = 0; v < NV; ++v)
            update(g.c + (i0 + r) * g.ldc + j0 + v * W, acc[r][v], std::min(W, cols - v * W), g.alpha, g.beta);
}

template <class T, std::size_t NV = rows_nv>
void rows_edge(const Operands<T>& g, const T* b_panel, std::size_t ldb, std::size_t i0, std::size_t j0, std::size_t rows,
               std::size_t cols) {
    if constexpr (NV > 1)
        if (cols <= (NV - 1) * lanes<T>) return rows_edge<T, NV - 1>(g, b_panel, ldb, i0, j0, rows, cols);
    rows_tile<T, NV, false>(g, b_panel, ldb, i0, j0, rows, cols);
}

// C in panels of tile_cols columns; with B transposed (stored (n,k)) each panel of op(B) is first
// copied into a (k, tile_cols) buffer, once per panel, for all the rows of C.
template <class T>
void gemm_panels(const Operands<T>& g, bool b_trans) {
    constexpr std::size_t tile_cols = rows_nv * lanes<T>;
    thread_local std::vector<T> packed;  // grows to the largest k seen, then is reused
    if (b_trans && packed.size() < g.k * tile_cols) packed.resize(g.k * tile_cols);
    for (std::size_t j0 = 0; j0 < g.n; j0 += tile_cols) {
        const std::size_t cols = std::min(tile_cols, g.n - j0);
        const T* b_panel = g.b + j0;
        std::size_t ldb = g.ldb;
        if (b_trans) {
            for (std::size_t j = 0; j < cols; ++j) {
                const T* b_row = g.b + (j0 + j) * g.ldb;
                for (std::size_t p = 0; p < g.k; ++p) packed[p * tile_cols + j] = b_row[p];
            }
            b_panel = packed.data(), ldb = tile_cols;
        }
        for (std::size_t i0 = 0; i0 < g.m; i0 += rows_mr) {
            const std::size_t rows = std::min(rows_mr, g.m - i0);
            if (rows == rows_mr && cols == tile_cols) rows_tile<T, rows_nv, true>(g, b_panel, ldb, i0, j0, rows, cols);
            else rows_edge(g, b_panel, ldb, i0, j0, rows, cols);
        }
    }
}

// Whether this kernel is used instead of OpenBLAS: only when compiled for AVX-512, where it was
// measured (1.7-2x the rate of Debian's OpenBLAS 0.3.21, which runs its AVX2 kernels on that CPU,
// from (256,192,64) to (512,768,256), float32 and float64: docs/performance.md); every side at
// least 32 (below that OpenBLAS's small-matrix paths win); k at most 1024 (a packed panel of B
// then stays within L2). Both operands transposed is left to BLAS.
inline bool preferred(bool a_trans, bool b_trans, std::size_t m, std::size_t n, std::size_t k) {
    return many_registers && !(a_trans && b_trans) && std::min({m, n, k}) >= 32 && k <= 1024;
}

// C (m,n) = alpha · op(A) op(B) + beta · C with k ≥ 1; k = 0 is the caller's.
template <class T>
void gemm(bool a_trans, bool b_trans, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) {
    const Operands<T> g{a_trans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc};
    gemm_panels(g, b_trans);
}

}  // namespace xgrad::blas::small
