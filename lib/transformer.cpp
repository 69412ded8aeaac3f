// libxgrad: the Transformer family's layers, stacks and forwards,
// for float and double: each header's XGRAD_COMPILED_IN(transformer, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_transformer XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
