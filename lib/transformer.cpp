// libxgrad: the Transformer family's layers and forwards, for float and double (the list is in
// xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_TRANSFORMER(, float)
XGRAD_PRECOMPILED_TRANSFORMER(, double)
}  // namespace xgrad
