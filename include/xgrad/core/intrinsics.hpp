// <immintrin.h>, the x86 intrinsics under xsimd (and so under xtensor) and xgrad's own kernels, with
// g++ 12's false "'__Y' is used uninitialized" / "may be used uninitialized" switched off inside it.
//
// g++ 12's intrinsic headers build the unused lanes of a masked builtin from `__m512d __Y = __Y;`
// (_mm512_undefined_pd and friends, on purpose), and warn about it wherever such an intrinsic is
// inlined into user code: GCC bug 105593, fixed in later releases. A diagnostic pragma applies to
// the source it encloses, so the warnings are off for the intrinsic headers' code only: an
// uninitialized variable in xgrad's own code is still reported.
// The wrap works when this header comes before xsimd's or xtensor's first include: xgrad/core/var.hpp
// and xgrad/core/simd.hpp include it first, and meson.build puts it at the start of every unit.
#pragma once

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
