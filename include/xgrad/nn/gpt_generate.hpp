// nn::generate, for every decoder, is in nn/generate.hpp; this name is kept for programs that include it.
#pragma once
#include "xgrad/nn/generate.hpp"
