// bfloat16 for matmul operands: the top 16 bits of a float32 (8 exponent bits, 7 mantissa bits),
// rounded to nearest even as PyTorch and oneDNN round; NaN stays NaN. Only GEMM operands are
// stored in it (kernels::gemm under MatmulPrecision::bfloat16); everything else stays float32.
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace xgrad::kernels {

struct bfloat16 {
    std::uint16_t bits;
};

inline bfloat16 to_bfloat16(float x) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
    const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const bool nan = (u & 0x7fffffffu) > 0x7f800000u;  // a NaN's low bits could round it to inf
    return {std::uint16_t(nan ? (u >> 16) | 0x40u : rounded)};
}
inline float to_float(bfloat16 x) { return std::bit_cast<float>(std::uint32_t(x.bits) << 16); }

// dst (rows, cols), packed = src (rows, cols) with rows ld apart, each element rounded.
inline void to_bfloat16(const float* src, std::size_t rows, std::size_t cols, std::size_t ld, bfloat16* dst) {
    for (std::size_t r = 0; r < rows; ++r) {
        const float* in = src + r * ld;
        bfloat16* out = dst + r * cols;
        for (std::size_t j = 0; j < cols; ++j) out[j] = to_bfloat16(in[j]);
    }
}

}  // namespace xgrad::kernels
