// libxgrad: the decoder-only models, nn::GPT and nn::Llama (construction, forwards, loss and
// sampling), and the fused linear cross-entropy of their heads, for float and double: each
// header's XGRAD_COMPILED_IN(decoders, ...) (xgrad/core/compiled.hpp). One unit: the two models
// share most of what they instantiate.
#define XGRAD_DETAIL_UNIT_decoders XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
