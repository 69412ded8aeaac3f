// libxgrad: the kernel layer (GEMM, softmax, attention scores, mask merging), for float and double
// (the list is in xgrad/precompiled.hpp). The library's other units and programs call it.
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_KERNELS(, float)
XGRAD_PRECOMPILED_KERNELS(, double)
XGRAD_PRECOMPILED_KERNELS_BFLOAT16()
}  // namespace xgrad
