// The products of float operands rounded to bfloat16 (xgrad/kernels/gemm.hpp: RoundedMatrix,
// gemm_rounded, MatmulPrecision::bfloat16), on the GEMM back ends compiled in lib/kernels.cpp.
#include <utility>
#include <vector>

#include "xgrad/kernels/gemm.hpp"

namespace xgrad::kernels {

void RoundedMatrix::round(const float* stored, bool transposed, std::size_t rows, std::size_t cols, std::size_t ld) {
    if (rows * cols > capacity_) {
        data_ = std::make_unique_for_overwrite<bfloat16[]>(rows * cols);
        capacity_ = rows * cols;
    }
    rows_ = rows, cols_ = cols;
    bfloat16* packed = data_.get();
    parallel_for(rows, 4.0 * double(rows) * double(cols), [&](std::size_t begin, std::size_t end) {
        if (transposed) to_bfloat16_transposed(stored + begin, cols, end - begin, ld, packed + begin * cols);
        else to_bfloat16(stored + begin * ld, end - begin, cols, ld, packed + begin * cols);
    });
}

namespace detail {
void gemm_rounded_on(GemmBackend backend, const RoundedMatrix& a, const RoundedMatrix& b, bool b_trans, float alpha,
                     float beta, float* c, std::size_t ldc, const float* bias) {
    const std::size_t m = a.rows(), k = a.cols(), n = b_trans ? b.rows() : b.cols();
    if (backend == GemmBackend::onednn)
        return gemm_blocks(backend, false, b_trans, m, n, k, alpha, a.data(), k, b.data(), b.cols(), beta, c, ldc, bias);
    thread_local std::vector<float> a_widened, b_widened;  // grown once: a steady step allocates nothing
    for (auto [rounded, widened] : {std::pair{&a, &a_widened}, {&b, &b_widened}}) {
        const std::size_t size = rounded->rows() * rounded->cols();
        if (widened->size() < size) widened->resize(size);
        to_float(rounded->data(), size, widened->data());
    }
    gemm_blocks(backend, false, b_trans, m, n, k, alpha, a_widened.data(), k, b_widened.data(), b.cols(), beta, c, ldc,
                bias);
}

void gemm_bfloat16(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                   std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc,
                   const float* bias) {
    thread_local RoundedMatrix a16, b16;
    a16.round(a, ta, m, k, lda);  // op(A), packed
    b16.round(b, false, tb ? n : k, tb ? k : n, ldb);  // B as stored
    gemm_rounded(a16, b16, tb, alpha, beta, c, ldc, bias);
}
}  // namespace detail

void gemm_rounded(const RoundedMatrix& a, const RoundedMatrix& b, bool b_trans, float alpha, float beta, float* c,
                  std::size_t ldc, const float* bias) {
    const std::size_t m = a.rows(), k = a.cols(), n = b_trans ? b.rows() : b.cols();
    if ((b_trans ? b.cols() : b.rows()) != k)
        throw shape_error("gemm_rounded: A (" + std::to_string(m) + ", " + std::to_string(k) + ") and B (" +
                          std::to_string(b.rows()) + ", " + std::to_string(b.cols()) + ")" + (b_trans ? "ᵀ" : "") +
                          " do not chain");
    if (!backend_available<bfloat16>(GemmBackend::onednn))
        throw value_error("gemm: bfloat16 matmuls: " + bfloat16_matmul_unsupported());
    if (m == 0 || n == 0) return;
    if (k == 0) return detail::scale_add_bias(c, m, n, ldc, beta, bias);
    for (std::size_t d : {m, n, k, ldc}) detail::check_blas_dim(d);
    std::vector<float> scratch;  // the first product of a shape class is timed into it, not into C
    const GemmBackend backend = GemmChoices::instance().choose<bfloat16>(
        gemm_class<bfloat16>(false, b_trans, m, n, k), [&](GemmBackend candidate) {
            scratch.resize(m * n);
            return detail::seconds_of(
                [&] { detail::gemm_rounded_on(candidate, a, b, b_trans, alpha, 0.0f, scratch.data(), n, nullptr); });
        });
    detail::gemm_rounded_on(backend, a, b, b_trans, alpha, beta, c, ldc, bias);
}

}  // namespace xgrad::kernels
