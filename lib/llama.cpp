// libxgrad: nn::Llama's construction, forwards and loss, for float and double (the list is in
// xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_LLAMA(, float)
XGRAD_PRECOMPILED_LLAMA(, double)
}  // namespace xgrad
