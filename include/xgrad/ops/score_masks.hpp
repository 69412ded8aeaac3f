// Moved to the kernel layer: xgrad/kernels/score_masks.hpp (namespace kernels).
#pragma once
#include "xgrad/kernels/score_masks.hpp"
