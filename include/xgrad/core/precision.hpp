// The precision float32 matmuls run in on this thread: float32, or bfloat16 operands with float32
// accumulation and result (xgrad::Autocast, core/autocast.hpp, is the user's scope). kernels::gemm
// reads it; the tape stores it in every node it records and restores it while that node's backward
// runs, so a backward pass repeats the precision of its forward wherever it is called from.
// float64 matmuls ignore it (gradcheck stays in double).
#pragma once
#include <cstdint>

namespace xgrad {

enum class MatmulPrecision : std::uint8_t { float32, bfloat16 };

inline const char* precision_name(MatmulPrecision p) { return p == MatmulPrecision::bfloat16 ? "bfloat16" : "float32"; }

namespace detail {
inline MatmulPrecision& matmul_precision() {
    thread_local MatmulPrecision current = MatmulPrecision::float32;
    return current;
}
// Sets the precision for a scope without checking the CPU (the tape's backward walk; Autocast checks).
class MatmulPrecisionScope {
public:
    explicit MatmulPrecisionScope(MatmulPrecision p) : previous_(matmul_precision()) { matmul_precision() = p; }
    ~MatmulPrecisionScope() { matmul_precision() = previous_; }
    MatmulPrecisionScope(const MatmulPrecisionScope&) = delete;
    MatmulPrecisionScope& operator=(const MatmulPrecisionScope&) = delete;

private:
    MatmulPrecision previous_;
};
}  // namespace detail

// The precision of float32 matmuls recorded now on this thread.
inline MatmulPrecision matmul_precision() { return detail::matmul_precision(); }

}  // namespace xgrad
