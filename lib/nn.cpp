// libxgrad: MultiheadAttention's forward, scaled_dot_product_attention and the initializers,
// for float and double (the list is in xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_NN(, float)
XGRAD_PRECOMPILED_NN(, double)
}  // namespace xgrad
