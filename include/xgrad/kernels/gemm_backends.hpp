// The GEMM back ends that kernels::gemm (gemm.hpp) chooses from, each run on one block of C on
// one thread (xgrad's threads split a product into blocks):
//   xgrad     the register-tiled kernel of gemm_tiled.hpp (builds with 32 vector registers: AVX-512)
//   openblas  OpenBLAS's cblas_sgemm / cblas_dgemm, and cblas_sgemv / cblas_dgemv for one row of C
//   onednn    oneDNN's matmul (float and bfloat16 operands, no double; when built with Debian's
//             libdnnl-dev, gemm_onednn.hpp), which picks its AVX2, AVX-512 or AMX code for the CPU
//             it runs on; the only one that multiplies bfloat16 operands natively
//             (MatmulPrecision::bfloat16). The other two take them widened to float (exact) and sum
//             the same products in float32: faster where a small product costs oneDNN more in its
//             call than in its arithmetic (gemm.hpp, gemm_rounded).
// Which one runs for a product is decided in gemm_choice.hpp.
#pragma once
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <cblas.h>

#ifndef XGRAD_HAVE_ONEDNN  // set by meson, xgrad.pc and xgradConfig.cmake when oneDNN was found
#define XGRAD_HAVE_ONEDNN 0
#endif
#include "xgrad/core/error.hpp"
#include "xgrad/kernels/bfloat16.hpp"
#include "xgrad/kernels/gemm_tiled.hpp"
#if XGRAD_HAVE_ONEDNN
#include "xgrad/kernels/gemm_onednn.hpp"
#endif

namespace xgrad::kernels {

enum class GemmBackend { xgrad, openblas, onednn };
inline constexpr GemmBackend all_gemm_backends[] = {GemmBackend::xgrad, GemmBackend::openblas, GemmBackend::onednn};

inline const char* backend_name(GemmBackend b) {
    switch (b) {
        case GemmBackend::xgrad: return "xgrad";
        case GemmBackend::openblas: return "openblas";
        case GemmBackend::onednn: return "onednn";
    }
    return "?";
}
inline std::optional<GemmBackend> parse_backend(std::string_view name) {
    for (GemmBackend b : all_gemm_backends)
        if (name == backend_name(b)) return b;
    return std::nullopt;
}

// Whether this build can run `b` on operands of type T (float, double, or bfloat16 for a float C).
template <class T>
constexpr bool backend_available(GemmBackend b) {
    switch (b) {
        case GemmBackend::xgrad: return tiled::many_registers;
        case GemmBackend::openblas: return true;
        case GemmBackend::onednn: return bool(XGRAD_HAVE_ONEDNN) && !std::is_same_v<T, double>;
    }
    return false;
}

namespace detail {

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

// Why this process cannot run bfloat16 matmuls at their rate, or "" when it can.
inline std::string bfloat16_matmul_unsupported() {
#if XGRAD_HAVE_ONEDNN
    return detail::bfloat16_matmul_unsupported();
#else
    return "this xgrad was built without oneDNN (Debian's libdnnl-dev), which runs them";
#endif
}

// C (m,n) = alpha · op(A) op(B) + beta · C (+ bias (n) on every row when not null), k ≥ 1, on the
// calling thread with back end `backend` (available for T). Leading dimensions are row lengths of
// the stored matrices, as in gemm.hpp; the caller has checked that they fit the BLAS integer.
// Operands In are T, or bfloat16 for a float C (oneDNN only).
template <class T, class In>
void gemm_block(GemmBackend backend, bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, T alpha,
                const In* a, std::size_t lda, const In* b, std::size_t ldb, T beta, T* c, std::size_t ldc,
                const T* bias) {
    constexpr bool bf16 = std::is_same_v<In, bfloat16>;
    static_assert(std::is_same_v<In, T> || (bf16 && std::is_same_v<T, float>));
    if constexpr (!bf16 && tiled::many_registers)
        if (backend == GemmBackend::xgrad) return tiled::gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias);
    // OpenBLAS and oneDNN have no bias: C = beta · C + bias first, then C += alpha · op(A) op(B)
    if (bias) detail::scale_add_bias(c, m, n, ldc, beta, bias);
    const T product_beta = bias ? T(1) : beta;
#if XGRAD_HAVE_ONEDNN
    if constexpr (std::is_same_v<T, float>)
        if (bf16 || backend == GemmBackend::onednn)
            return detail::onednn_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, product_beta, c, ldc);
#endif
    const auto flag = [](bool trans) { return trans ? CblasTrans : CblasNoTrans; };
    if constexpr (!bf16)
        if (m == 1) {  // one row of C: a matrix-vector product reads op(B) once where OpenBLAS's GEMM
                       // packs it first (kernels::gemm sends one row against B's rows to gemv.hpp
                       // instead). c (n) = alpha · op(B)ᵀ a + beta · c, op(B) (k, n) stored (n, k) when tb.
            if (product_beta == T(0)) std::fill_n(c, n, T(0));  // no NaN of c's old memory survives
            const T gemv_beta = product_beta == T(0) ? T(1) : product_beta;
            const auto shape = tb ? CblasNoTrans : CblasTrans;
            const blasint rows = blasint(tb ? n : k), cols = blasint(tb ? k : n), inc_a = ta ? blasint(lda) : 1;
            if constexpr (std::is_same_v<T, float>)
                cblas_sgemv(CblasRowMajor, shape, rows, cols, alpha, b, blasint(ldb), a, inc_a, gemv_beta, c, 1);
            else
                cblas_dgemv(CblasRowMajor, shape, rows, cols, alpha, b, blasint(ldb), a, inc_a, gemv_beta, c, 1);
            return;
        }
    if constexpr (std::is_same_v<In, float>)
        cblas_sgemm(CblasRowMajor, flag(ta), flag(tb), blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b,
                    blasint(ldb), product_beta, c, blasint(ldc));
    else if constexpr (std::is_same_v<In, double>)
        cblas_dgemm(CblasRowMajor, flag(ta), flag(tb), blasint(m), blasint(n), blasint(k), alpha, a, blasint(lda), b,
                    blasint(ldb), product_beta, c, blasint(ldc));
}

}  // namespace xgrad::kernels
