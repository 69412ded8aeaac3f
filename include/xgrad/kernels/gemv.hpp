// One row of C against a B stored (n, k): c_j = alpha · (a · b_j) + beta · c_j (+ bias_j), each
// element one dot product that streams row j of B. This is a decoder's step at one position (every
// Linear, and the scores against a key cache): it reads each element of B once, so memory bandwidth
// bounds it, and one row after another in address order is the hardware prefetcher's best case.
// OpenBLAS's GEMV runs it 20-25 % slower and oneDNN's matmul slower still (a Llama of 61 MB of weights,
// one thread, Zen 3-class EPYC: bench/HISTORY.md), so kernels::gemm sends such products here
// on every CPU, without timing back ends. Each c_j is summed in the same order whatever the threads.
#pragma once
#include <cstddef>

#include <xsimd/xsimd.hpp>

#include "xgrad/core/parallel.hpp"
#include "xgrad/core/simd.hpp"

namespace xgrad::kernels::detail {

// a · b over k elements: four vectors per step (independent FMA chains), then single vectors, then
// the partial last one.
template <class T>
[[gnu::always_inline]] inline T dot_streaming(const T* a, const T* b, std::size_t k) {
    using V = simd::Vec<T>;
    constexpr std::size_t W = simd::lanes<T>;
    V s0(T(0)), s1(T(0)), s2(T(0)), s3(T(0));
    std::size_t p = 0;
    for (; p + 4 * W <= k; p += 4 * W) {
        s0 = xsimd::fma(V::load_unaligned(b + p), V::load_unaligned(a + p), s0);
        s1 = xsimd::fma(V::load_unaligned(b + p + W), V::load_unaligned(a + p + W), s1);
        s2 = xsimd::fma(V::load_unaligned(b + p + 2 * W), V::load_unaligned(a + p + 2 * W), s2);
        s3 = xsimd::fma(V::load_unaligned(b + p + 3 * W), V::load_unaligned(a + p + 3 * W), s3);
    }
    for (; p + W <= k; p += W) s0 = xsimd::fma(V::load_unaligned(b + p), V::load_unaligned(a + p), s0);
    if (p < k) s1 = xsimd::fma(simd::load_part(b + p, k - p), simd::load_part(a + p, k - p), s1);
    return simd::reduce_add((s0 + s1) + (s2 + s3));
}

// c (n) = alpha · B (n, k) a (k) + beta · c + bias (null: none); a contiguous, B's rows ldb apart.
// beta 0 never reads c (its old memory may hold NaN).
template <class T>
void gemv_rows(std::size_t n, std::size_t k, T alpha, const T* a, const T* b, std::size_t ldb, T beta, T* c,
               const T* bias) {
    parallel_for(n, 2.0 * double(n) * double(k), [&](std::size_t first, std::size_t last) {
        for (std::size_t j = first; j < last; ++j) {
            T v = alpha * dot_streaming(a, b + j * ldb, k);
            if (beta != T(0)) v += beta * c[j];
            if (bias) v += bias[j];
            c[j] = v;
        }
    });
}

}  // namespace xgrad::kernels::detail
