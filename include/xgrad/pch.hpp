// The header to precompile in a program that links libxgrad (docs/install.md, "Compiling faster"):
// one line in meson (`cpp_pch`) or CMake (`xgrad_precompile_headers`), and every unit of the program
// starts from the compiler's saved state of xgrad's and xtensor's headers instead of parsing them.
// A program's own templates (its modules, its expressions) are still compiled in it.
//
// For programs that link libxgrad (pkg-config xgrad, xgrad::xgrad): g++ 12 does not keep the
// diagnostic pragmas of xgrad/core/intrinsics.hpp in a precompiled header, so SIMD kernels compiled
// in the program itself (header-only use) would bring back g++ 12's false '__Y' warnings; with
// libxgrad they are compiled in the library.
// (No #pragma once: compiled as a main file, g++ warns of one; what it includes is guarded.)
#include <xgrad/xgrad.hpp>
#include <xtensor/xio.hpp>
#include <xtensor/xoperation.hpp>
#include <xtensor/xview.hpp>
