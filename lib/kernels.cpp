// libxgrad: the kernel layer (GEMM, softmax, attention scores, mask merging, the vectorized math),
// for float and double: each header's XGRAD_COMPILED_IN(kernels, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_kernels XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
