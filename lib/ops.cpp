// libxgrad: the tape's nodes and backward, and the ops,
// for float and double: each header's XGRAD_COMPILED_IN(ops, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_ops XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
