// Mixed precision, as torch.autocast("cpu", dtype=torch.bfloat16) trains: inside the scope every
// float32 matmul recorded on this thread (Linear, matmul, attention's scores and weights·V, the
// GPT's lm_head) rounds its operands to bfloat16 and accumulates in float32, and so does its
// backward, wherever backward() is called. Everything else stays float32: parameters, gradients,
// optimizer state, LayerNorm and softmax statistics, the loss. float64 is never touched.
//
//   {
//       xgrad::Autocast autocast(xgrad::MatmulPrecision::bfloat16);
//       auto loss = model.loss(x, y);
//       xgrad::backward(loss);           // or after the scope: the same precision either way
//   }
//   optimizer.step();
//
// Unlike PyTorch, results and saved activations stay float32 (rounded operands, float32 outputs),
// so the error is that of the bfloat16 operands alone. A CPU without native bfloat16 (AVX512_BF16
// or AMX) gets a value_error here rather than a slow emulation.
#pragma once
#include "xgrad/core/error.hpp"
#include "xgrad/core/precision.hpp"
#include "xgrad/kernels/gemm_backends.hpp"

namespace xgrad {

// Why bfloat16 matmuls cannot run here at their rate, or "" when they can.
inline std::string bfloat16_unsupported() { return kernels::bfloat16_matmul_unsupported(); }

class Autocast {
public:
    explicit Autocast(MatmulPrecision precision = MatmulPrecision::bfloat16) : scope_(checked(precision)) {}
    Autocast(const Autocast&) = delete;
    Autocast& operator=(const Autocast&) = delete;

private:
    static MatmulPrecision checked(MatmulPrecision precision) {
        if (precision == MatmulPrecision::bfloat16)
            if (const std::string why = bfloat16_unsupported(); !why.empty())
                throw value_error("xgrad::Autocast(bfloat16): " + why + "; train in float32 here");
        return precision;
    }
    detail::MatmulPrecisionScope scope_;
};

}  // namespace xgrad
