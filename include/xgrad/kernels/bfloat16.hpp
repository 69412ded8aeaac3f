// bfloat16 for matmul operands: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits),
// rounded to nearest even as PyTorch and oneDNN round; NaN stays NaN. Only GEMM operands are
// stored in it (kernels::gemm under MatmulPrecision::bfloat16); everything else stays float32.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace xgrad::kernels {

struct bfloat16 {
    std::uint16_t bits;
};

// Float bits u become their bfloat16 bits, in the low 16 bits: one 32-bit value or a vector of them
// (in place: GCC's vector types are not passed by value, which would warn about the ABI).
template <class Bits>
void round_to_bfloat16_bits(Bits& u) {
    const Bits rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    u = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded;  // a NaN's low bits could round it to inf
}

inline bfloat16 to_bfloat16(float x) {
    std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    round_to_bfloat16_bits(u);
    return {std::uint16_t(u)};
}
inline float to_float(bfloat16 x) { return std::bit_cast<float>(std::uint32_t(x.bits) << 16); }
// dst[i] = src[i] as floats, for i < n (exact; vectorized by the compiler).
inline void to_float(const bfloat16* src, std::size_t n, float* dst) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}

namespace detail {

using Floats16 = float __attribute__((vector_size(64)));
using Ints16 = std::int32_t __attribute__((vector_size(64)));
using Uints16 = std::uint32_t __attribute__((vector_size(64)));
using Halves16 = std::uint16_t __attribute__((vector_size(32)));

// to_bfloat16 on 16 lanes at once, into out[0, 16).
inline void to_bfloat16(const Floats16& x, bfloat16* out) {
    Uints16 u;
    __builtin_memcpy(&u, &x, sizeof(u));
    round_to_bfloat16_bits(u);
    const Halves16 halves = __builtin_convertvector(u, Halves16);
    __builtin_memcpy(out, &halves, sizeof(halves));
}

// Stage `bit` of a 16 × 16 transpose in registers: rows i and i|bit swap their blocks of columns
// with that bit, so after the stages for bits 8, 4, 2, 1 row i holds column i.
template <int bit, bool upper, class Lanes = std::make_integer_sequence<int, 16>>
struct StageMask;
template <int bit, bool upper, int... j>
struct StageMask<bit, upper, std::integer_sequence<int, j...>> {  // lanes 16.. are the second row's
    static constexpr Ints16 value{(upper ? ((j & bit) ? 16 + j : j + bit) : ((j & bit) ? 16 + j - bit : j))...};
};
template <int bit>
void transpose_stage(Floats16 (&rows)[16]) {
    constexpr Ints16 lower_mask = StageMask<bit, false>::value, upper_mask = StageMask<bit, true>::value;
#pragma GCC unroll 16  // constant indices: the 16 rows stay in registers
    for (int i = 0; i < 16; ++i)
        if (!(i & bit)) {
            const Floats16 lower = rows[i], upper = rows[i | bit];
            rows[i] = __builtin_shuffle(lower, upper, lower_mask);
            rows[i | bit] = __builtin_shuffle(lower, upper, upper_mask);
        }
}

}  // namespace detail

// dst (rows, cols), packed = src (rows, cols) with rows ld apart, each element rounded: 16 at a time
// (GCC leaves the scalar loop scalar at -O2), the end of each row one by one.
inline void to_bfloat16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld, bfloat16* dst) {
    for (std::size_t r = 0; r < rows; ++r) {
        const float* in = src + r * ld;
        bfloat16* out = dst + r * cols;
        const std::size_t whole = cols - cols % 16;
        for (std::size_t j = 0; j < whole; j += 16) {
            detail::Floats16 x;
            __builtin_memcpy(&x, in + j, sizeof(x));
            detail::to_bfloat16(x, out + j);
        }
        for (std::size_t j = whole; j < cols; ++j) out[j] = to_bfloat16(in[j]);
    }
}

// dst (cols, rows), packed = the transpose of src (rows, cols) with rows ld apart, rounded: blocks of
// 16 × 16 transposed in registers, the edges one element at a time.
inline void to_bfloat16_transposed(const float* src, std::size_t rows, std::size_t cols, std::size_t ld,
                                   bfloat16* dst) {
    const std::size_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
    constexpr std::size_t strip = 256;  // columns read per row at a time: 16 rows of it fit in L1
    for (std::size_t s0 = 0; s0 < full_cols; s0 += strip)
        for (std::size_t r0 = 0; r0 < full_rows; r0 += 16)
            for (std::size_t c0 = s0; c0 < std::min(full_cols, s0 + strip); c0 += 16) {
                detail::Floats16 block[16];
#pragma GCC unroll 16
                for (int r = 0; r < 16; ++r) __builtin_memcpy(&block[r], src + (r0 + r) * ld + c0, sizeof(block[r]));
                detail::transpose_stage<8>(block);
                detail::transpose_stage<4>(block);
                detail::transpose_stage<2>(block);
                detail::transpose_stage<1>(block);
#pragma GCC unroll 16
                for (int c = 0; c < 16; ++c) detail::to_bfloat16(block[c], dst + (c0 + c) * rows + r0);
            }
    const auto one = [&](std::size_t r, std::size_t c) { dst[c * rows + r] = to_bfloat16(src[r * ld + c]); };
    for (std::size_t r = full_rows; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c) one(r, c);
    for (std::size_t r = 0; r < full_rows; ++r)
        for (std::size_t c = full_cols; c < cols; ++c) one(r, c);
}

}  // namespace xgrad::kernels
