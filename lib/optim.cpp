// libxgrad: the optimizers, for float and double (the list is in xgrad/precompiled.hpp).
#include "xgrad/precompiled.hpp"

namespace xgrad {
XGRAD_PRECOMPILED_OPTIM(, float)
XGRAD_PRECOMPILED_OPTIM(, double)
}  // namespace xgrad
