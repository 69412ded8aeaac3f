// libxgrad: nn::GPT's construction, forwards, loss and sampling, for float and double (the list is
// in xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_GPT(, float)
XGRAD_PRECOMPILED_GPT(, double)
}  // namespace xgrad
