// The GEMM entry point of the kernel layer: every matmul of xgrad goes through kernels::gemm,
// which runs the back end chosen for this CPU and shape (gemm_choice.hpp: xgrad's own kernel,
// OpenBLAS or oneDNN, measured once per shape class), or a streaming kernel for one row of C against
// B's rows (gemv.hpp); callers never choose.
//   C (m,n) = alpha · op(A) (m,k) · op(B) (k,n) + beta · C, plus an optional bias (n) added to
//   every row (Linear's, in the same pass as the product). Transposes are flags on the stored
//   matrices, never materialized.
// xgrad's threads split a large GEMM into blocks (core/parallel.hpp), one single-threaded back-end
// call each. Under MatmulPrecision::bfloat16 (core/precision.hpp, xgrad::Autocast) a float product
// rounds A and B to bfloat16 and multiplies them accumulating in float32 (gemm_rounded).
#pragma once
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/error.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/core/precision.hpp"
#include "xgrad/kernels/gemm_choice.hpp"
#include "xgrad/kernels/gemv.hpp"

namespace xgrad::kernels {

enum class Op { none, trans };

namespace detail {

// How long f() takes, in seconds: how GemmChoices times each candidate back end.
template <class F>
double seconds_of(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

inline void check_blas_dim(std::size_t d) {
    if (d > static_cast<std::size_t>(INT_MAX))
        throw value_error("gemm: dimension " + std::to_string(d) + " exceeds the BLAS integer range");
}

// How much of k one back-end call sums (later panels accumulate onto C): a long inner dimension
// (lm_head's dX sums over a vocabulary of 50304) thrashes the cache in xgrad's kernel, which packs
// all of k for a tile, and slows oneDNN's plain-layout kernels (float32 by a third, bfloat16 by a
// tenth). Panels of at most 8 KB of a row of op(A), equal and a multiple of 32: fixed by k alone,
// so the result does not depend on the threads. OpenBLAS blocks k itself.
template <class In>
std::size_t k_panel(GemmBackend backend, std::size_t k) {
    const std::size_t most = 8192 / sizeof(In);
    if (backend == GemmBackend::openblas || k <= most) return k;
    const std::size_t panels = (k + most - 1) / most;
    return ((k + panels - 1) / panels + 31) / 32 * 32;
}

// The product with `backend` on xgrad's threads: C split into blocks of rows (or of columns when
// wider than tall), one call per block. xgrad's kernel sums each element over k the same way
// whatever the block, so its result does not depend on the thread count. oneDNN blocks k by the
// shape of the call, and so does OpenBLAS on some CPUs (seen on an AVX2 EPYC, not on AVX-512 ones):
// they get panels of a fixed 128 rows (or columns), whatever the threads.
template <class T, class In>
void gemm_blocks(GemmBackend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
                 const In* a, std::size_t lda, const In* b, std::size_t ldb, T beta, T* c, std::size_t ldc,
                 const T* bias) {
    // bfloat16 operands get whole rows of C: oneDNN's brgemm kernels take no C with rows further apart
    // than its width (it would fall back to a GEMM that allocates on every call). Its float32 products
    // keep column panels where wider than tall: that older GEMM is faster there than brgemm in rows.
    const bool by_rows = m >= n || std::is_same_v<In, bfloat16>;
    const std::size_t depth = k_panel<In>(backend, k);
    const auto block = [&](std::size_t begin, std::size_t end) {
        const std::size_t rows = by_rows ? end - begin : m, cols = by_rows ? n : end - begin;
        const In* a_block = by_rows ? a + (ta ? begin : begin * lda) : a;
        const In* b_block = by_rows ? b : b + (tb ? begin * ldb : begin);
        T* c_block = c + (by_rows ? begin * ldc : begin);
        const T* bias_block = bias && !by_rows ? bias + begin : bias;
        // C = alpha · A₀B₀ + beta · C + bias, then C += alpha · AₚBₚ for the later panels p of k
        for (std::size_t p0 = 0; p0 < k; p0 += depth) {
            const bool first = p0 == 0;
            gemm_block(backend, ta, tb, rows, cols, std::min(depth, k - p0), alpha, a_block + (ta ? p0 * lda : p0), lda,
                       b_block + (tb ? p0 : p0 * ldb), ldb, first ? beta : T(1), c_block, ldc,
                       first ? bias_block : nullptr);
        }
    };
    const std::size_t extent = by_rows ? m : n;
    const double flops = 2.0 * double(m) * double(n) * double(k);
    if (backend == GemmBackend::xgrad && !std::is_same_v<In, bfloat16>) return parallel_for(extent, flops, block);
    // blocks of at least 128 × 128 elements of C: a product of few rows (a decoder's one position)
    // runs in a few long calls, not in hundreds of calls of 128 columns
    const std::size_t across = by_rows ? n : m, panel = 128 * std::max<std::size_t>(1, 128 / std::max<std::size_t>(across, 1));
    parallel_for((extent + panel - 1) / panel, flops, [&](std::size_t first, std::size_t last) {
        for (std::size_t p = first; p < last; ++p) block(p * panel, std::min(extent, (p + 1) * panel));
    });
}

// The product with bfloat16 operands and float32 accumulation (MatmulPrecision::bfloat16), both
// rounded here on this call (see RoundedMatrix and gemm_rounded below to round once for several).
void gemm_bfloat16(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                   std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                   const float* bias);
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
    if (m == 1 && tb) {  // one row against B's rows: streamed, no back end to choose (gemv.hpp)
        if (!ta || lda == 1) return detail::gemv_rows(n, k, alpha, a, b, ldb, beta, c, bias);
        std::vector<T> row(k);  // op(A)'s one row, stored as a column
        for (std::size_t p = 0; p < k; ++p) row[p] = a[p * lda];
        return detail::gemv_rows(n, k, alpha, row.data(), b, ldb, beta, c, bias);
    }
    std::vector<T> scratch;  // the first product of a shape class is timed into it, not into C
    const GemmBackend backend = GemmChoices::instance().choose<T>(gemm_class<T>(ta, tb, m, n, k), [&](GemmBackend candidate) {
        scratch.resize(m * n);
        return detail::seconds_of([&] {
            detail::gemm_blocks(candidate, ta, tb, m, n, k, alpha, a, lda, b, ldb, T(0), scratch.data(), n,
                                static_cast<const T*>(nullptr));
        });
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

// ---- bfloat16 operands (MatmulPrecision::bfloat16) ----

// A float matrix rounded to bfloat16 and packed, kept by its owner for several products: a Linear
// rounds X and W once in forward and multiplies the same copies again in backward, as
// torch.autocast keeps its casts. Growing storage: no allocation once it has held the largest.
class RoundedMatrix {
public:
    // This = op(M) (rows, cols) of M stored (rows, cols), or (cols, rows) when `transposed`, ld
    // apart; rounded on xgrad's threads.
    void round(const float* stored, bool transposed, std::size_t rows, std::size_t cols, std::size_t ld);
    const bfloat16* data() const { return data_.get(); }
    std::size_t rows() const { return rows_; }
    std::size_t cols() const { return cols_; }

private:
    std::unique_ptr<bfloat16[]> data_;
    std::size_t capacity_ = 0, rows_ = 0, cols_ = 0;
};

namespace detail {
// gemm_rounded's product on `backend`: oneDNN multiplies the bfloat16 operands; xgrad's kernel and
// OpenBLAS multiply them widened to float, in buffers of this thread. Either way the products are
// exact in float32 and summed in float32: the back end changes rounding only.
void gemm_rounded_on(GemmBackend backend, const RoundedMatrix& a, const RoundedMatrix& b, bool b_trans, float alpha,
                     float beta, float* c, std::size_t ldc, const float* bias);
}  // namespace detail

// C (m,n) = alpha · A (m,k) · op(B) + beta · C (+ bias (n) on every row), A and B rounded before:
// B is (k,n), or (n,k) when b_trans (oneDNN's bfloat16 kernels take a transposed B, not A). In
// float32, whatever the current MatmulPrecision, on the back end chosen for the shape class of
// bfloat16 operands ("bf16 ..." in GemmChoices): oneDNN's bfloat16 matmul, or for a small product
// (where oneDNN's call costs more than its arithmetic) a float32 kernel on the widened operands.
void gemm_rounded(const RoundedMatrix& a, const RoundedMatrix& b, bool b_trans, float alpha, float beta, float* c,
                  std::size_t ldc, const float* bias = nullptr);

}  // namespace xgrad::kernels

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the GEMM, and the products of bfloat16
// operands (Autocast, gemm_rounded) in float.
namespace xgrad {
#define XGRAD_DETAIL_GEMM_COMPILED(EXTERN, T)                                                                      \
    EXTERN template void kernels::gemm<T>(kernels::Op, kernels::Op, std::size_t, std::size_t, std::size_t, T,     \
                                          const T*, std::size_t, const T*, std::size_t, T, T*, std::size_t,       \
                                          const T*);                                                              \
    EXTERN template void kernels::detail::gemm_blocks<T, T>(kernels::GemmBackend, bool, bool, std::size_t,         \
                                                            std::size_t, std::size_t, T, const T*, std::size_t,   \
                                                            const T*, std::size_t, T, T*, std::size_t, const T*);
#define XGRAD_DETAIL_GEMM_BFLOAT16_COMPILED(EXTERN, T)                                                             \
    EXTERN template void kernels::detail::gemm_blocks<T, kernels::bfloat16>(                                       \
        kernels::GemmBackend, bool, bool, std::size_t, std::size_t, std::size_t, T, const kernels::bfloat16*,     \
        std::size_t, const kernels::bfloat16*, std::size_t, T, T*, std::size_t, const T*);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_GEMM_COMPILED)
XGRAD_COMPILED_IN_FOR(kernels, XGRAD_DETAIL_GEMM_BFLOAT16_COMPILED, float)
#undef XGRAD_DETAIL_GEMM_BFLOAT16_COMPILED
#undef XGRAD_DETAIL_GEMM_COMPILED
}  // namespace xgrad
