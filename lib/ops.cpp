// libxgrad: the tape's backward, the GEMM and the ops, for float and double (the list is in
// xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_OPS(, float)
XGRAD_PRECOMPILED_OPS(, double)
}  // namespace xgrad
