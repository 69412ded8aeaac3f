// libxgrad: nn::GPT's construction, forwards, loss and sampling,
// for float and double: each header's XGRAD_COMPILED_IN(gpt, ...) (xgrad/core/compiled.hpp).
#define XGRAD_DETAIL_UNIT_gpt XGRAD_DETAIL_DEFINE
#include "xgrad/xgrad.hpp"
