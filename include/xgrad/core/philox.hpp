// Philox4x32-10, the counter-based random number generator of Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3" (SC 2011). A keyed bijection of a 128-bit counter:
// the n-th random block is philox(n, key), computed from n alone, so any element of a stream can be
// drawn in any order, on any thread, vectorized, with the same result.
//
// One round maps the counter (c0, c1, c2, c3) with the round key (k0, k1) to
//   (hi(M1·c2) ⊕ c1 ⊕ k0,  lo(M1·c2),  hi(M0·c0) ⊕ c3 ⊕ k1,  lo(M0·c0))
// where hi and lo are the upper and lower 32 bits of the 64-bit product, M0 = 0xD2511F53 and
// M1 = 0xCD9E8D57. Ten rounds; between rounds the key is bumped by the Weyl constants
// (k0, k1) += (0x9E3779B9, 0xBB67AE85) (the golden ratio and √3 − 1, as 32-bit fractions).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

#include "xgrad/core/intrinsics.hpp"  // the AVX-512 intrinsics, g++ 12 warnings off inside them

namespace xgrad::philox {

using Counter = std::array<std::uint32_t, 4>;
using Key = std::array<std::uint32_t, 2>;

inline constexpr std::uint32_t multiplier0 = 0xD2511F53u, multiplier1 = 0xCD9E8D57u;
inline constexpr std::uint32_t weyl0 = 0x9E3779B9u, weyl1 = 0xBB67AE85u;
inline constexpr int rounds = 10;

// The four 32-bit words of the block at `counter` under `key`.
constexpr Counter block(Counter c, Key k) {
    for (int r = 0; r < rounds; ++r) {
        if (r > 0) k = {k[0] + weyl0, k[1] + weyl1};
        const std::uint64_t p0 = std::uint64_t(multiplier0) * c[0], p1 = std::uint64_t(multiplier1) * c[2];
        c = {std::uint32_t(p1 >> 32) ^ c[1] ^ k[0], std::uint32_t(p1), std::uint32_t(p0 >> 32) ^ c[3] ^ k[1],
             std::uint32_t(p0)};
    }
    return c;
}

// `W` blocks at once: the counters (first + l, c1, c2, c3) for l < W (first + l must not wrap
// past 2³²); words[w][l] receives word w of block l. In AVX-512 builds sixteen lanes per register.
template <std::size_t W>
void blocks(std::uint32_t first, std::uint32_t c1, std::uint32_t c2, std::uint32_t c3, Key k,
            std::array<std::array<std::uint32_t, W>, 4>& words) {
#if defined(__AVX512F__)
    if constexpr (W % 16 == 0) {
        constexpr std::size_t V = W / 16;
        // (hi, lo) of the sixteen 64-bit products m · x: mul_epu32 multiplies the even 32-bit
        // lanes; the odd ones are shifted down first.
        const auto mulhilo = [](__m512i m, __m512i x, __m512i& hi, __m512i& lo) {
            const __m512i even = _mm512_mul_epu32(x, m), odd = _mm512_mul_epu32(_mm512_srli_epi64(x, 32), m);
            lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
            hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
        };
        const __m512i m0 = _mm512_set1_epi32(int(multiplier0)), m1 = _mm512_set1_epi32(int(multiplier1));
        __m512i x0[V], x1[V], x2[V], x3[V];
        const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        for (std::size_t v = 0; v < V; ++v) {
            x0[v] = _mm512_add_epi32(_mm512_set1_epi32(int(first + 16 * v)), lane);
            x1[v] = _mm512_set1_epi32(int(c1)), x2[v] = _mm512_set1_epi32(int(c2)), x3[v] = _mm512_set1_epi32(int(c3));
        }
        for (int r = 0; r < rounds; ++r) {
            if (r > 0) k = {k[0] + weyl0, k[1] + weyl1};
            const __m512i k0 = _mm512_set1_epi32(int(k[0])), k1 = _mm512_set1_epi32(int(k[1]));
            for (std::size_t v = 0; v < V; ++v) {
                __m512i hi0, lo0, hi1, lo1;
                mulhilo(m0, x0[v], hi0, lo0);
                mulhilo(m1, x2[v], hi1, lo1);
                x0[v] = _mm512_xor_si512(_mm512_xor_si512(hi1, x1[v]), k0), x1[v] = lo1;
                x2[v] = _mm512_xor_si512(_mm512_xor_si512(hi0, x3[v]), k1), x3[v] = lo0;
            }
        }
        for (std::size_t v = 0; v < V; ++v) {
            _mm512_storeu_si512(words[0].data() + 16 * v, x0[v]), _mm512_storeu_si512(words[1].data() + 16 * v, x1[v]);
            _mm512_storeu_si512(words[2].data() + 16 * v, x2[v]), _mm512_storeu_si512(words[3].data() + 16 * v, x3[v]);
        }
        return;
    }
#endif
    for (std::size_t l = 0; l < W; ++l) {
        const Counter out = block({first + std::uint32_t(l), c1, c2, c3}, k);
        for (std::size_t w = 0; w < 4; ++w) words[w][l] = out[w];
    }
}

}  // namespace xgrad::philox
