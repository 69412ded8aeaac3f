// libxgrad: the optimizers and gradient clipping,
// for float and double: each header's XGRAD_COMPILED_IN(optim, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_optim XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
