// Moved to the kernel layer: xgrad/kernels/softmax.hpp (namespace kernels).
#pragma once
#include "xgrad/kernels/softmax.hpp"
