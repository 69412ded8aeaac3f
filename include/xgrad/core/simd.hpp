// SIMD helpers over xsimd batches for what xsimd 8.1 lacks or does slowly: partial vectors (the
// last `count` elements of a row), the horizontal max and sum. AVX-512 has masked loads and
// stores for them; other instruction sets go through a small buffer.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <type_traits>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/intrinsics.hpp"  // before xsimd: g++ 12 warnings off inside the intrinsics
#include <xsimd/xsimd.hpp>

namespace xgrad::simd {

template <class T>
using Vec = xsimd::batch<T>;
template <class T>
inline constexpr std::size_t lanes = Vec<T>::size;
// True when Vec<T> is one 512-bit register, the width of the masked intrinsics below.
template <class T>
inline constexpr bool is_avx512 =
#if defined(__AVX512F__)
    lanes<T> * sizeof(T) == 64;
#else
    false;
#endif

#if defined(__AVX512F__)
// The mask of the first `count` (≤ 16) lanes.
inline __mmask16 first_lanes(std::size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }
#endif

// The `count` (≤ lanes) elements at p, `fill` in the lanes after them; nothing past them is read.
template <class T>
[[gnu::always_inline]] inline Vec<T> load_part(const T* p, std::size_t count, T fill = T(0)) {
#if defined(__AVX512F__)
    if constexpr (is_avx512<T>) {
        if constexpr (std::is_same_v<T, float>) return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(count), p);
        else return _mm512_mask_loadu_pd(_mm512_set1_pd(fill), static_cast<__mmask8>(first_lanes(count)), p);
    }
#endif
    if (count == lanes<T>) return Vec<T>::load_unaligned(p);
    alignas(64) std::array<T, lanes<T>> buffer;
    buffer.fill(fill);
    std::copy(p, p + count, buffer.begin());
    return Vec<T>::load_aligned(buffer.data());
}

// Stores the first `count` (≤ lanes) elements of v at p, writing nothing past them.
template <class T>
[[gnu::always_inline]] inline void store_part(T* p, Vec<T> v, std::size_t count) {
#if defined(__AVX512F__)
    if constexpr (is_avx512<T>) {
        if constexpr (std::is_same_v<T, float>) return _mm512_mask_storeu_ps(p, first_lanes(count), v);
        else return _mm512_mask_storeu_pd(p, static_cast<__mmask8>(first_lanes(count)), v);
    }
#endif
    if (count == lanes<T>) return v.store_unaligned(p);
    alignas(64) std::array<T, lanes<T>> buffer;
    v.store_aligned(buffer.data());
    std::copy_n(buffer.begin(), count, p);
}

// The largest lane (NaN lanes may or may not win, as with std::max).
template <class T>
[[gnu::always_inline]] inline T reduce_max(Vec<T> v) {
#if defined(__AVX512F__)
    if constexpr (is_avx512<T>) {
        if constexpr (std::is_same_v<T, float>) return _mm512_reduce_max_ps(v);
        else return _mm512_reduce_max_pd(v);
    }
#endif
    alignas(64) std::array<T, lanes<T>> buffer;
    v.store_aligned(buffer.data());
    return *std::max_element(buffer.begin(), buffer.end());
}

// The sum of the lanes.
template <class T>
[[gnu::always_inline]] inline T reduce_add(Vec<T> v) {
#if defined(__AVX512F__)
    if constexpr (is_avx512<T>) {
        if constexpr (std::is_same_v<T, float>) return _mm512_reduce_add_ps(v);
        else return _mm512_reduce_add_pd(v);
    }
#endif
    return xsimd::hadd(v);
}

// f(v) for one of xsimd's math functions (log, exp, tanh, erf, ...) on a batch v. On AVX-512BW it
// runs as AVX-512DQ, which AVX-512BW inherits everything these use from (the same code, the same
// results): xsimd 8.1's AVX-512BW select on integer lanes, which several of them take, does not
// compile at -O0 under g++ 12 (it casts the batch to __v64qi inside an intrinsic that is a macro
// when not optimizing).
template <class B, class F>
[[gnu::always_inline]] inline B apply_math(F f, B v) {
#if defined(__AVX512BW__)
    if constexpr (std::is_same_v<typename B::arch_type, xsimd::avx512bw>)
        return B(f(xsimd::batch<typename B::value_type, xsimd::avx512dq>(v.data)).data);
    else
#endif
        return f(v);
}

// xsimd's exp, log, tanh, erf and sqrt of each lane (an expression's loop, linear's GELU, the normal
// generator). Not inline: a program that links libxgrad calls the library's (listed below),
// because g++ 12 warns falsely ("'__Y' may be used uninitialized") where their AVX-512 intrinsics
// are inlined into a unit built from a precompiled header, which keeps none of core/intrinsics.hpp's
// diagnostic pragmas.
template <class T>
Vec<T> exp(Vec<T> v) {
    return apply_math([](auto b) { return xsimd::exp(b); }, v);
}
template <class T>
Vec<T> log(Vec<T> v) {
    return apply_math([](auto b) { return xsimd::log(b); }, v);
}
template <class T>
Vec<T> tanh(Vec<T> v) {
    return apply_math([](auto b) { return xsimd::tanh(b); }, v);
}
template <class T>
Vec<T> erf(Vec<T> v) {
    return apply_math([](auto b) { return xsimd::erf(b); }, v);
}
template <class T>
Vec<T> sqrt(Vec<T> v) {
    return apply_math([](auto b) { return xsimd::sqrt(b); }, v);
}

}  // namespace xgrad::simd

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SIMD_MATH_COMPILED(EXTERN, T)                \
    EXTERN template simd::Vec<T> simd::exp<T>(simd::Vec<T>);      \
    EXTERN template simd::Vec<T> simd::log<T>(simd::Vec<T>);      \
    EXTERN template simd::Vec<T> simd::tanh<T>(simd::Vec<T>);     \
    EXTERN template simd::Vec<T> simd::erf<T>(simd::Vec<T>);      \
    EXTERN template simd::Vec<T> simd::sqrt<T>(simd::Vec<T>);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_SIMD_MATH_COMPILED)
#undef XGRAD_DETAIL_SIMD_MATH_COMPILED
}  // namespace xgrad
