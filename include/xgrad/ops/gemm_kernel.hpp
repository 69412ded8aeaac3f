// Moved to the kernel layer: xgrad/kernels/gemm_tiled.hpp (namespace kernels::tiled).
#pragma once
#include "xgrad/ops/blas.hpp"
