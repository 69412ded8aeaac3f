// The GEMM entry point of the kernel layer: every matmul of xgrad goes through kernels::gemm,
// which runs the back end chosen for this CPU and shape (gemm_choice.hpp: xgrad's own kernel,
// OpenBLAS or oneDNN, measured once per shape class); callers never choose.
//   C (m,n) = alpha · op(A) (m,k) · op(B) (k,n) + beta · C, plus an optional bias (n) added to
//   every row (Linear's, in the same pass as the product). Transposes are flags on the stored
//   matrices, never materialized.
// xgrad's threads split a large GEMM into blocks (core/parallel.hpp), one single-threaded back-end
// call each. Under MatmulPrecision::bfloat16 (core/precision.hpp, xgrad::Autocast) a float product
// rounds A and B to bfloat16 and runs oneDNN's bfloat16 matmul, accumulating in float32.
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/core/error.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/core/precision.hpp"
#include "xgrad/kernels/gemm_choice.hpp"

namespace xgrad::kernels {

enum class Op { none, trans };

namespace detail {

inline void check_blas_dim(std::size_t d) {
    if (d > static_cast<std::size_t>(INT_MAX))
        throw value_error("gemm: dimension " + std::to_string(d) + " exceeds the BLAS integer range");
}

// The product with `backend` on xgrad's threads: C split into blocks of rows (or of columns when
// wider than tall), one call per block. xgrad's kernel and OpenBLAS sum each element over k the
// same way whatever the block, so their result does not depend on the thread count. oneDNN blocks
// k by the shape of the call: it gets panels of a fixed 128 rows (or columns), whatever the threads.
template <class T, class In>
void gemm_blocks(GemmBackend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
                 const In* a, std::size_t lda, const In* b, std::size_t ldb, T beta, T* c, std::size_t ldc,
                 const T* bias) {
    const bool by_rows = m >= n || std::is_same_v<In, bfloat16>;  // oneDNN's bf16 kernels want whole rows of C
    const auto block = [&](std::size_t begin, std::size_t end) {
        const std::size_t rows = by_rows ? end - begin : m, cols = by_rows ? n : end - begin;
        const In* a_block = by_rows ? a + (ta ? begin : begin * lda) : a;
        const In* b_block = by_rows ? b : b + (tb ? begin * ldb : begin);
        T* c_block = c + (by_rows ? begin * ldc : begin);
        const T* bias_block = bias && !by_rows ? bias + begin : bias;
        gemm_block(backend, ta, tb, rows, cols, k, alpha, a_block, lda, b_block, ldb, beta, c_block, ldc, bias_block);
    };
    const std::size_t extent = by_rows ? m : n;
    const double flops = 2.0 * double(m) * double(n) * double(k);
    if (backend != GemmBackend::onednn && !std::is_same_v<In, bfloat16>) return parallel_for(extent, flops, block);
    constexpr std::size_t panel = 128;
    parallel_for((extent + panel - 1) / panel, flops, [&](std::size_t first, std::size_t last) {
        for (std::size_t p = first; p < last; ++p) block(p * panel, std::min(extent, (p + 1) * panel));
    });
}

// A growing buffer per thread for bfloat16 copies of operands (no zeroing, no allocation once grown).
class Bfloat16Buffer {
public:
    bfloat16* get(std::size_t size) {
        if (size > size_) {
            data_ = std::make_unique_for_overwrite<bfloat16[]>(size);
            size_ = size;
        }
        return data_.get();
    }

private:
    std::unique_ptr<bfloat16[]> data_;
    std::size_t size_ = 0;
};

// op(M) (rows, cols) of M stored (rows, cols) or, when `transposed`, (cols, rows), ld apart: rounded
// to bfloat16 into `buffer`, packed row-major; on xgrad's threads.
inline const bfloat16* rounded_operand(const float* stored, bool transposed, std::size_t rows, std::size_t cols,
                                       std::size_t ld, Bfloat16Buffer& buffer) {
    bfloat16* packed = buffer.get(rows * cols);
    parallel_for(rows, 4.0 * double(rows) * double(cols), [&](std::size_t begin, std::size_t end) {
        if (transposed) to_bfloat16_transposed(stored + begin, cols, end - begin, ld, packed + begin * cols);
        else to_bfloat16(stored + begin * ld, end - begin, cols, ld, packed + begin * cols);
    });
    return packed;
}

// The product with bfloat16 operands and float32 accumulation (MatmulPrecision::bfloat16). A is
// packed as op(A) (m,k), B as stored: oneDNN's brgemm kernels take a transposed B, not A (it would
// fall back to a GEMM that allocates on every call).
inline void gemm_bfloat16(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                          std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                          const float* bias) {
    if (!backend_available<float>(GemmBackend::onednn))
        throw value_error("gemm: bfloat16 matmuls: " + bfloat16_matmul_unsupported());
    thread_local Bfloat16Buffer a_buffer, b_buffer;
    const bfloat16* a16 = rounded_operand(a, ta, m, k, lda, a_buffer);
    const bfloat16* b16 = rounded_operand(b, false, tb ? n : k, tb ? k : n, ldb, b_buffer);
    gemm_blocks(GemmBackend::onednn, false, tb, m, n, k, alpha, a16, k, b16, tb ? k : n, beta, c, ldc, bias);
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
    // checked here: the blocks run on pool threads, which must not throw
    for (std::size_t d : {m, n, k, lda, ldb, ldc}) detail::check_blas_dim(d);
    const bool ta = op_a == Op::trans, tb = op_b == Op::trans;
    if constexpr (std::is_same_v<T, float>)
        if (matmul_precision() == MatmulPrecision::bfloat16)
            return detail::gemm_bfloat16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
    std::vector<T> scratch;  // the first product of a shape class is timed into it, not into C
    const GemmBackend backend = GemmChoices::instance().choose<T>(gemm_class<T>(ta, tb, m, n, k), [&](GemmBackend candidate) {
        scratch.resize(m * n);
        const auto start = std::chrono::steady_clock::now();
        detail::gemm_blocks(candidate, ta, tb, m, n, k, alpha, a, lda, b, ldb, T(0), scratch.data(), n,
                            static_cast<const T*>(nullptr));
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    detail::gemm_blocks(backend, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
}

// A is stored (m,k) when op_a is none, (k,m) when trans; B likewise (k,n) or (n,k). All row-major
// and contiguous, so each leading dimension is the stored row length.
template <class T>
void gemm(Op op_a, Op op_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, const T* b, T beta,
          T* c, const T* bias = nullptr) {
    gemm(op_a, op_b, m, n, k, alpha, a, op_a == Op::none ? k : m, b, op_b == Op::none ? n : k, beta, c, n, bias);
}

}  // namespace xgrad::kernels
