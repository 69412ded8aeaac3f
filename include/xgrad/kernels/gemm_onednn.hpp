// oneDNN as a GEMM back end (gemm_backends.hpp): its matmul primitive on row-major matrices with
// leading dimensions, C = alpha · op(A) op(B) + beta · C (alpha as output scales, beta as a sum
// post-op), A and B float32 or bfloat16 (bfloat16.hpp), C float32. A primitive is made once per
// shape on each thread and kept, with its memory objects and its scratchpad (oneDNN's packing
// buffers, given by us), so that a training step's products allocate nothing. dnnl_sgemm would be
// simpler but allocates its buffers on every call. Debian's oneDNN threads with OpenMP; each
// calling thread asks for a team of one (xgrad's threads already run one block each). Compiled in
// libxgrad (lib/gemm_onednn.cpp), so programs do not parse oneDNN's headers.
#pragma once
#include <cstddef>
#include <string>

#include "xgrad/kernels/bfloat16.hpp"

namespace xgrad::kernels::detail {

// C (m,n, float) = alpha · op(A) op(B) + beta · C with A and B both float or both bfloat16.
void onednn_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const float* a,
                 std::size_t lda, const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);
void onednn_gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, float alpha, const bfloat16* a,
                 std::size_t lda, const bfloat16* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// Why this process cannot run bfloat16 matmuls at their rate, or "" when it can: oneDNN's native
// code needs AVX512_BF16 (Cooper Lake, Zen 4 and later) or AMX; without them it would emulate.
std::string bfloat16_matmul_unsupported();

std::string onednn_version();  // "3.0.0"

}  // namespace xgrad::kernels::detail
