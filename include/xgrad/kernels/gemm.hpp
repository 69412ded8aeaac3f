// The GEMM entry point of the kernel layer: every matmul of xgrad goes through kernels::gemm,
// which picks the back end for this build and CPU; callers never choose.
//   C (m,n) = alpha · op(A) (m,k) · op(B) (k,n) + beta · C, plus an optional bias (n) added to
//   every row (Linear's, in the same pass as the product). Transposes are flags on the stored
//   matrices, never materialized.
// Back ends: xgrad's own register-tiled kernel (gemm_tiled.hpp) in AVX-512 builds for k ≤ 2048
// (tiled::preferred), OpenBLAS otherwise. xgrad's threads split a large GEMM into blocks
// (core/parallel.hpp).
#pragma once
#include <algorithm>
#include <climits>
#include <cstddef>
#include <string>
#include <type_traits>

#include <cblas.h>

#include "xgrad/core/error.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/kernels/gemm_tiled.hpp"

namespace xgrad::kernels {

enum class Op { none, trans };

namespace detail {

inline blasint dim(std::size_t d) {
    if (d > static_cast<std::size_t>(INT_MAX))
        throw value_error("gemm: dimension " + std::to_string(d) + " exceeds the BLAS integer range");
    return static_cast<blasint>(d);
}
inline CBLAS_TRANSPOSE flag(Op op) { return op == Op::trans ? CblasTrans : CblasNoTrans; }

// C's rows [0, rows) of n, ldc apart: C = beta · C + bias (bias may be null), C not read when beta is 0.
template <class T>
void scale_add_bias(T* c, std::size_t rows, std::size_t n, std::size_t ldc, T beta, const T* bias) {
    for (std::size_t r = 0; r < rows; ++r) {
        T* row = c + r * ldc;
        if (beta == T(0)) {
            if (bias) std::copy(bias, bias + n, row);
            else std::fill(row, row + n, T(0));
        } else {
            for (std::size_t j = 0; j < n; ++j) row[j] = beta * row[j] + (bias ? bias[j] : T(0));
        }
    }
}

}  // namespace detail

// The same on matrices inside larger arrays: row r of the stored A starts at a + r·lda (likewise
// B and C), so a head's columns of a (tokens, 3E) projection are used in place. bias: null, or n
// values added to every row of C.
template <class T>
void gemm(Op op_a, Op op_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
          const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc, const T* bias = nullptr) {
    if (m == 0 || n == 0) return;
    if (k == 0) {  // empty sum: C = beta · C + bias
        if (beta != T(1) || bias) detail::scale_add_bias(c, m, n, ldc, beta, bias);
        return;
    }
    const auto ta = detail::flag(op_a), tb = detail::flag(op_b);
    const blasint ik = detail::dim(k), ilda = detail::dim(lda), ildb = detail::dim(ldb), ildc = detail::dim(ldc);
    (void)detail::dim(m), (void)detail::dim(n);  // checked here: the blocks run on pool threads, which must not throw
    // With xgrad threads (core/parallel.hpp): C split into blocks of rows (or of columns when
    // wider than tall), one single-threaded kernel or BLAS call per block. Each element's sum over k is
    // unchanged, so the result does not depend on the thread count.
    const bool by_rows = m >= n;
    const bool use_tiled = tiled::preferred(k);
    parallel_for(by_rows ? m : n, 2.0 * double(m) * double(n) * double(k), [&](std::size_t begin, std::size_t end) {
        const std::size_t rows = by_rows ? end - begin : m, cols = by_rows ? n : end - begin;
        const T* a_block = by_rows ? a + (op_a == Op::none ? begin * lda : begin) : a;
        const T* b_block = by_rows ? b : b + (op_b == Op::none ? begin : begin * ldb);
        T* c_block = c + (by_rows ? begin * ldc : begin);
        const T* bias_block = bias && !by_rows ? bias + begin : bias;
        if (use_tiled) {
            tiled::gemm(op_a == Op::trans, op_b == Op::trans, rows, cols, k, alpha, a_block, lda, b_block, ldb, beta, c_block,
                         ldc, bias_block);
            return;
        }
        // OpenBLAS has no bias: C = beta · C + bias first, then C += alpha · op(A) op(B)
        const T blas_beta = bias ? T(1) : beta;
        if (bias) detail::scale_add_bias(c_block, rows, cols, ldc, beta, bias_block);
        if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(CblasRowMajor, ta, tb, blasint(rows), blasint(cols), ik, alpha, a_block, ilda, b_block, ildb,
                        blas_beta, c_block, ildc);
        else
            cblas_dgemm(CblasRowMajor, ta, tb, blasint(rows), blasint(cols), ik, alpha, a_block, ilda, b_block, ildb,
                        blas_beta, c_block, ildc);
    });
}

// A is stored (m,k) when op_a is none, (k,m) when trans; B likewise (k,n) or (n,k). All row-major
// and contiguous, so each leading dimension is the stored row length.
template <class T>
void gemm(Op op_a, Op op_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, const T* b, T beta,
          T* c, const T* bias = nullptr) {
    gemm(op_a, op_b, m, n, k, alpha, a, op_a == Op::none ? k : m, b, op_b == Op::none ? n : k, beta, c, n, bias);
}

}  // namespace xgrad::kernels
