// libxgrad: nn::Llama's construction, forwards, loss and sampling,
// for float and double: each header's XGRAD_COMPILED_IN(llama, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_llama XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
