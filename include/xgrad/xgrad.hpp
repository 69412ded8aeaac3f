// xgrad: reverse-mode autodiff over xtensor. Include this one header.
#pragma once
#include "xgrad/core/error.hpp"
#include "xgrad/core/tape.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/check/gradcheck.hpp"
#include "xgrad/check/random.hpp"
