// libxgrad: the modules, for float and double: MultiheadAttention, scaled_dot_product_attention,
// Linear and the initializers, the Transformer family's layers and stacks, nn::GPT and nn::Llama
// (construction, forwards, loss, sampling) with the fused linear cross-entropy of their heads:
// each header's XGRAD_COMPILED_IN(nn, ...) (xgrad/core/compiled.hpp). One unit: the modules share
// most of what they instantiate (a sixth less CPU than three units, 2.2 GB at -O3).
#define XGRAD_DETAIL_UNIT_nn XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
