// Moved to the kernel layer: the GEMM entry point is kernels::gemm (xgrad/kernels/gemm.hpp). The
// names blas::gemm, blas::Op and blas::kernel (now kernels::tiled) stay for existing code.
#pragma once
#include "xgrad/kernels/gemm.hpp"

namespace xgrad::blas {
using kernels::gemm;
using kernels::Op;
namespace kernel = kernels::tiled;
}  // namespace xgrad::blas
