// libxgrad: MultiheadAttention's forward, scaled_dot_product_attention, Linear and the
// initializers, the Transformer family's layers, stacks and forwards, for float and double: each
// header's XGRAD_COMPILED_IN(nn, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_nn XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
