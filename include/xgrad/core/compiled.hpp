// The code compiled once in libxgrad. A header whose templates the library compiles lists their
// instantiations beside them, as a macro LIST(EXTERN, T) of `EXTERN template ...;` written inside
// namespace xgrad, and ends with
//     XGRAD_COMPILED_IN(unit, LIST)          // for float and double
//     XGRAD_COMPILED_IN_FOR(unit, LIST, T)   // for one element type
//     XGRAD_COMPILED_ONCE_IN(unit, LIST)     // for code without one (LIST's T is void)
// where unit is the libxgrad file that compiles them (lib/<unit>.cpp). That is the whole list:
//   - in a program that links libxgrad, built for the library's SIMD level (XGRAD_PRECOMPILED is
//     1), the line declares them `extern template`, so the program does not compile them again;
//   - in lib/<unit>.cpp, which defines XGRAD_DETAIL_UNIT_<unit> as XGRAD_DETAIL_DEFINE before its
//     includes, the same line instantiates them;
//   - in a program built for another SIMD level, or without the library, it says nothing and the
//     program compiles what it uses itself (slower, the same result).
#pragma once
#include "xgrad/core/intrinsics.hpp"  // before xsimd: g++ 12 warnings off inside the intrinsics
#include <xtensor/xtensor_config.hpp>

// xtensor's allocation alignment for this compilation's SIMD level, from the compiler's own macros.
#if defined(__AVX512F__)
#define XGRAD_DETAIL_SIMD_ALIGNMENT 64
#elif defined(__AVX__)
#define XGRAD_DETAIL_SIMD_ALIGNMENT 32
#else
#define XGRAD_DETAIL_SIMD_ALIGNMENT 16
#endif

// XGRAD_LIBRARY_SIMD_ALIGNMENT: the library's alignment, which xgrad.pc and the in-tree dependency
// define; a program compiled for that level has the library's container types.
#if defined(XGRAD_LIBRARY_SIMD_ALIGNMENT) && defined(XTENSOR_USE_XSIMD) && \
    XGRAD_LIBRARY_SIMD_ALIGNMENT == XGRAD_DETAIL_SIMD_ALIGNMENT
// 1 when this program uses libxgrad's compiled code, else 0.
#define XGRAD_PRECOMPILED 1
static_assert(XTENSOR_DEFAULT_ALIGNMENT == XGRAD_LIBRARY_SIMD_ALIGNMENT,
              "xgrad: xgrad/core/compiled.hpp misjudged xtensor's alignment for this SIMD level; compile without "
              "XGRAD_LIBRARY_SIMD_ALIGNMENT (xgrad then compiles everything in your program) and report it");
#define XGRAD_DETAIL_DECLARE(LIST, T) LIST(extern, T)
#else
#define XGRAD_PRECOMPILED 0
#define XGRAD_DETAIL_DECLARE(LIST, T)
#endif
#define XGRAD_DETAIL_DEFINE(LIST, T) LIST(, T)

// libxgrad's units: each declares the lists of the others.
#ifndef XGRAD_DETAIL_UNIT_kernels
#define XGRAD_DETAIL_UNIT_kernels XGRAD_DETAIL_DECLARE
#endif
#ifndef XGRAD_DETAIL_UNIT_ops
#define XGRAD_DETAIL_UNIT_ops XGRAD_DETAIL_DECLARE
#endif
#ifndef XGRAD_DETAIL_UNIT_nn
#define XGRAD_DETAIL_UNIT_nn XGRAD_DETAIL_DECLARE
#endif
#ifndef XGRAD_DETAIL_UNIT_optim
#define XGRAD_DETAIL_UNIT_optim XGRAD_DETAIL_DECLARE
#endif

#define XGRAD_COMPILED_IN_FOR(UNIT, LIST, T) XGRAD_DETAIL_UNIT_##UNIT(LIST, T)
#define XGRAD_COMPILED_IN(UNIT, LIST) XGRAD_COMPILED_IN_FOR(UNIT, LIST, float) XGRAD_COMPILED_IN_FOR(UNIT, LIST, double)
#define XGRAD_COMPILED_ONCE_IN(UNIT, LIST) XGRAD_COMPILED_IN_FOR(UNIT, LIST, void)

// LIST_N(EXTERN, T, N) for the ranks 1 to 4, and 0 to 4.
#define XGRAD_COMPILED_RANKS_1_TO_4(LIST_N, EXTERN, T) \
    LIST_N(EXTERN, T, 1) LIST_N(EXTERN, T, 2) LIST_N(EXTERN, T, 3) LIST_N(EXTERN, T, 4)
#define XGRAD_COMPILED_RANKS_0_TO_4(LIST_N, EXTERN, T) \
    LIST_N(EXTERN, T, 0) XGRAD_COMPILED_RANKS_1_TO_4(LIST_N, EXTERN, T)
