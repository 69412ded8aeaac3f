// libxgrad: the heavy specializations (the kernel layer: GEMM, softmax, attention scores and masks;
// MultiheadAttention's forward, the Transformer family's forwards, nn::GPT, linear and matmul,
// softmax, layer_norm, the losses, embedding, reductions, shape ops, initializers, backward, the
// optimizers) compiled once, for float and double, into the library that `dependency('xgrad')`
// and `pkg-config --libs xgrad` link. Here they are declared `extern template`, so a program that
// includes xgrad.hpp does not compile them again; lib/*.cpp instantiates them from the same lists.
// Anything not listed (another element type or rank, an expression's fused node, a user's own op)
// is compiled in the program as before, only slower.
//
// Only a program that links libxgrad, compiled for the library's SIMD level, uses it: xgrad.pc
// (and the in-tree dependency) defines XGRAD_LIBRARY_SIMD_ALIGNMENT, xtensor's allocation alignment
// in the library (64 with AVX-512: meson's release build has -march=native). A program built for
// another level (e.g. without -march=native) has other container types and compiles everything
// itself; so does one that uses the headers without the library.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "xgrad/core/var.hpp"
#include "xgrad/nn/multihead_attention.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/sdpa.hpp"
#include "xgrad/kernels/attention_scores.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/kernels/gemm_tiled.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/kernels/softmax.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/nn/generate.hpp"
#include "xgrad/nn/llama.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/embedding.hpp"
#include "xgrad/ops/linalg.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/shape_concat.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/optim/adam.hpp"
#include "xgrad/optim/clip.hpp"
#include "xgrad/optim/sgd.hpp"

// ---- the lists: EXTERN is `extern` below and empty in lib/*.cpp; T is float or double; used
// inside namespace xgrad ----

// The storage of every node of rank N (0 to 4) and backward from it.
#define XGRAD_DETAIL_PRECOMPILED_NODE(EXTERN, T, N) \
    EXTERN template class TensorNode<T, N>;          \
    EXTERN template class LeafNode<T, N>;            \
    EXTERN template void backward<T, N>(const Var<T, N>&, const BackwardOptions&);

// Per rank N of the operand (1 to 4).
#define XGRAD_DETAIL_PRECOMPILED_RANK(EXTERN, T, N)                                                                 \
    XGRAD_DETAIL_PRECOMPILED_NODE(EXTERN, T, N)                                                                    \
    EXTERN template Var<T, N> detail::linear_vars<T, N>(const Var<T, N>&, const Var<T, 2>&, const Var<T, 1>*,     \
                                                        LinearActivation, const Var<T, N>*);                       \
    EXTERN template Var<T, N> softmax<T, N>(const Var<T, N>&, long);                                               \
    EXTERN template Var<T, N> log_softmax<T, N>(const Var<T, N>&, long);                                           \
    EXTERN template Var<T, N> detail::norm_impl<T, N>(const Var<T, N>&, const Var<T, 1>&, const Var<T, 1>&, double, \
                                                      bool);                                                       \
    EXTERN template Var<T, 0> detail::mse_loss_impl<0, T, N>(const Var<T, N>&, const Var<T, N>&, detail::LossMode); \
    EXTERN template Var<T, N> detail::mse_loss_impl<N, T, N>(const Var<T, N>&, const Var<T, N>&, detail::LossMode); \
    EXTERN template Var<T, 0> detail::cross_entropy_impl<0, T, N>(const Var<T, N>&,                                 \
                                                                const xt::xtensor<std::int64_t, N - 1>&,          \
                                                                const CrossEntropyOptions&, detail::LossMode);    \
    EXTERN template Var<T, 0> detail::reduce_all<T, N>(const Var<T, N>&, Reduction);                               \
    EXTERN template Var<T, N> detail::reduce_all_keep<T, N>(const Var<T, N>&, Reduction);                          \
    EXTERN template Var<T, N - 1> detail::reduce_axis<T, N>(const Var<T, N>&, long, Reduction);                    \
    EXTERN template Var<T, N> detail::reduce_axis_keep<T, N>(const Var<T, N>&, long, Reduction);                   \
    EXTERN template Var<T, N> dropout<T, N>(const Var<T, N>&, double, bool, Generator&);                           \
    EXTERN template Var<T, N> add_dropout<T, N>(const Var<T, N>&, const Var<T, N>&, double, bool, Generator&);     \
    EXTERN template Var<T, N> slice<T, N>(const Var<T, N>&, long, long, long);                                     \
    EXTERN template Var<T, N> transpose<T, N>(const Var<T, N>&, long, long);                                       \
    EXTERN template Var<T, N> permute<T, N>(const Var<T, N>&, const std::array<std::size_t, N>&);                  \
    EXTERN template Var<T, N> concat<T, N>(const std::vector<Var<T, N>>&, long);

// The kernel layer (xgrad/kernels/): the GEMM with its register tiles and back ends, the softmax
// kernels, the attention's score products and mask merging. Every op and module of the lists here
// reaches it, so it is compiled once, in libxgrad's kernels unit, and neither in the library's
// other units nor in a program.
#define XGRAD_PRECOMPILED_KERNELS(EXTERN, T)                                                                      \
    EXTERN template simd::Vec<T> simd::exp<T>(simd::Vec<T>);                                                      \
    EXTERN template simd::Vec<T> simd::log<T>(simd::Vec<T>);                                                      \
    EXTERN template simd::Vec<T> simd::tanh<T>(simd::Vec<T>);                                                     \
    EXTERN template simd::Vec<T> simd::erf<T>(simd::Vec<T>);                                                      \
    EXTERN template simd::Vec<T> simd::sqrt<T>(simd::Vec<T>);                                                     \
    EXTERN template void kernels::gemm<T>(kernels::Op, kernels::Op, std::size_t, std::size_t, std::size_t, T,     \
                                          const T*, std::size_t, const T*, std::size_t, T, T*, std::size_t,       \
                                          const T*);                                                              \
    EXTERN template void kernels::tiled::product<T>(const kernels::tiled::Plan<T>&, const T*, std::size_t);      \
    EXTERN template void kernels::tiled::pack_transposed<T>(const T*, std::size_t, std::size_t, std::size_t, T*,  \
                                                            std::size_t);                                         \
    XGRAD_DETAIL_PRECOMPILED_SOFTMAX_ROWS(EXTERN, false, T, kernels::NoMasks<T>)                                  \
    XGRAD_DETAIL_PRECOMPILED_SOFTMAX_ROWS(EXTERN, true, T, kernels::NoMasks<T>)                                   \
    XGRAD_DETAIL_PRECOMPILED_SOFTMAX_ROWS(EXTERN, false, T, kernels::RowMasks<T>)                                 \
    XGRAD_DETAIL_PRECOMPILED_SOFTMAX(EXTERN, false, T)                                                            \
    XGRAD_DETAIL_PRECOMPILED_SOFTMAX(EXTERN, true, T)                                                             \
    EXTERN template void kernels::scores_rows<T>(const T*, std::size_t, const T*, std::size_t, std::size_t,      \
                                                 std::size_t, std::size_t, T, T*, std::size_t);                   \
    EXTERN template void kernels::scores_columns<T>(const T*, std::size_t, const T*, std::size_t, std::size_t,   \
                                                    std::size_t, T, T*, std::size_t);                             \
    EXTERN template void kernels::apply_masks_columns<T>(const kernels::ScoreMasks<T>&, std::size_t, std::size_t, \
                                                         kernels::KeyRange, T*, std::size_t);                     \
    EXTERN template void kernels::merge_causal<T>(kernels::ScoreMasks<T>&, std::size_t, std::size_t);            \
    EXTERN template void kernels::merge_valid_lens<T>(kernels::ScoreMasks<T>&, const std::int64_t*,              \
                                                      std::span<const std::size_t>, std::size_t);                 \
    EXTERN template void detail::merge_any<T>(kernels::ScoreMasks<T>&, const AnyMask<T>&,                        \
                                              std::span<const std::size_t>, std::size_t);
// The products of bfloat16 operands (Autocast, gemm_rounded), float only.
#define XGRAD_PRECOMPILED_KERNELS_BFLOAT16(EXTERN)                                                                \
    EXTERN template void kernels::detail::gemm_blocks<float, kernels::bfloat16>(                                  \
        kernels::GemmBackend, bool, bool, std::size_t, std::size_t, std::size_t, float, const kernels::bfloat16*, \
        std::size_t, const kernels::bfloat16*, std::size_t, float, float*, std::size_t, const float*);
#define XGRAD_DETAIL_PRECOMPILED_SOFTMAX_ROWS(EXTERN, LOG, T, MASKS)                                             \
    EXTERN template void kernels::softmax_rows<LOG, T, MASKS>(T*, std::size_t, std::size_t, std::size_t,         \
                                                              kernels::EmptyLine, const MASKS&, T*);
#define XGRAD_DETAIL_PRECOMPILED_SOFTMAX(EXTERN, LOG, T)                                                          \
    EXTERN template void kernels::softmax_backward_rows<LOG, T>(const T*, const T*, T*, std::size_t, std::size_t, \
                                                                std::size_t, std::size_t, std::size_t, T, T);     \
    EXTERN template void kernels::softmax_columns<LOG, T>(T*, std::size_t, std::size_t, std::size_t,             \
                                                          kernels::EmptyLine);                                    \
    EXTERN template void kernels::softmax_backward_columns<LOG, T>(const T*, const T*, T*, std::size_t,          \
                                                                   std::size_t, std::size_t, T, T);

// Per rank N of the parameter (1 to 3).
#define XGRAD_DETAIL_PRECOMPILED_INIT(EXTERN, T, N)                                            \
    EXTERN template void init::uniform_<T, N>(Var<T, N>&, double, double, Generator&);         \
    EXTERN template void init::normal_<T, N>(Var<T, N>&, double, double, Generator&);          \
    EXTERN template void init::constant_<T, N>(Var<T, N>&, double);                            \
    EXTERN template void init::xavier_uniform_<T, N>(Var<T, N>&, Generator&, double);          \
    EXTERN template void init::xavier_normal_<T, N>(Var<T, N>&, Generator&, double);           \
    EXTERN template void init::kaiming_uniform_<T, N>(Var<T, N>&, double, Generator&);

// cross_entropy(..., unreduced) of rank-N logits (N from 2: of rank 1 it is the reduced one above).
#define XGRAD_DETAIL_PRECOMPILED_UNREDUCED_CROSS_ENTROPY(EXTERN, T, N)                                              \
    EXTERN template Var<T, N - 1> detail::cross_entropy_impl<N - 1, T, N>(                                           \
        const Var<T, N>&, const xt::xtensor<std::int64_t, N - 1>&, const CrossEntropyOptions&, detail::LossMode);

#define XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, NA, NB) \
    EXTERN template Var<T, NA> detail::matmul_vars<T, NA, NB>(const Var<T, NA>&, const Var<T, NB>&);

// The tape, the GEMM and the ops.
#define XGRAD_PRECOMPILED_OPS(EXTERN, T)                                                                          \
    XGRAD_DETAIL_PRECOMPILED_NODE(EXTERN, T, 0)                                                                   \
    EXTERN template void detail::gather_values<T>(const detail::LoopPlan<2>&, const T*, T*);                     \
    EXTERN template void detail::scatter_add<T>(const detail::LoopPlan<2>&, const T*, T*);                       \
    EXTERN template Var<T, 2> embedding<T, 1>(const Var<T, 2>&, const xt::xtensor<std::int64_t, 1>&,             \
                                              std::optional<long>);                                              \
    EXTERN template Var<T, 3> embedding<T, 2>(const Var<T, 2>&, const xt::xtensor<std::int64_t, 2>&,             \
                                              std::optional<long>);                                              \
    XGRAD_DETAIL_PRECOMPILED_RANK(EXTERN, T, 1)                                                                   \
    XGRAD_DETAIL_PRECOMPILED_RANK(EXTERN, T, 2)                                                                   \
    XGRAD_DETAIL_PRECOMPILED_RANK(EXTERN, T, 3)                                                                   \
    XGRAD_DETAIL_PRECOMPILED_RANK(EXTERN, T, 4)                                                                   \
    XGRAD_DETAIL_PRECOMPILED_UNREDUCED_CROSS_ENTROPY(EXTERN, T, 2)                                                \
    XGRAD_DETAIL_PRECOMPILED_UNREDUCED_CROSS_ENTROPY(EXTERN, T, 3)                                                \
    XGRAD_DETAIL_PRECOMPILED_UNREDUCED_CROSS_ENTROPY(EXTERN, T, 4)                                                \
    XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, 2, 2)                                                              \
    XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, 3, 3)                                                              \
    XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, 4, 4)                                                              \
    XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, 3, 2)                                                              \
    XGRAD_DETAIL_PRECOMPILED_MATMUL(EXTERN, T, 4, 2)

// MultiheadAttention's forward (batched and unbatched), scaled_dot_product_attention, Linear's
// constructor, the initializers.
#define XGRAD_PRECOMPILED_NN(EXTERN, T)                                                                               \
    EXTERN template nn::MhaOutput<T, 3> nn::MultiheadAttention<T>::forward<3>(                                        \
        const Var<T, 3>&, const Var<T, 3>&, const Var<T, 3>&, const nn::MhaForwardOptions<T>&) const;                 \
    EXTERN template nn::MhaOutput<T, 2> nn::MultiheadAttention<T>::forward<2>(                                        \
        const Var<T, 2>&, const Var<T, 2>&, const Var<T, 2>&, const nn::MhaForwardOptions<T>&) const;                 \
    EXTERN template Var<T, 3> scaled_dot_product_attention<T, 3>(const Var<T, 3>&, const Var<T, 3>&, const Var<T, 3>&, \
                                                                 no_mask_t, double, bool, std::optional<double>,      \
                                                                 Generator*, bool);                                   \
    EXTERN template Var<T, 4> scaled_dot_product_attention<T, 4>(const Var<T, 4>&, const Var<T, 4>&, const Var<T, 4>&, \
                                                                 no_mask_t, double, bool, std::optional<double>,      \
                                                                 Generator*, bool);                                   \
    EXTERN template struct nn::Linear<T>;                                                                             \
    XGRAD_DETAIL_PRECOMPILED_INIT(EXTERN, T, 1)                                                                       \
    XGRAD_DETAIL_PRECOMPILED_INIT(EXTERN, T, 2)                                                                       \
    XGRAD_DETAIL_PRECOMPILED_INIT(EXTERN, T, 3)

// The Transformer family (torch's layers, stacks and nn.Transformer), batched and unbatched: every
// forward entry point ends in one of these.
#define XGRAD_DETAIL_PRECOMPILED_TRANSFORMER_RANK(EXTERN, T, N)                                                      \
    EXTERN template nn::TransformerLayerOutput<T, N> nn::TransformerEncoderLayer<T>::forward_with_weights<N>(        \
        const Var<T, N>&, const nn::EncoderForwardOptions<T, N>&) const;                                            \
    EXTERN template nn::TransformerLayerOutput<T, N> nn::TransformerDecoderLayer<T>::forward_with_weights<N>(        \
        const Var<T, N>&, const Var<T, N>&, const nn::DecoderForwardOptions<T, N>&) const;                          \
    EXTERN template nn::TransformerStackOutput<T, N> nn::TransformerEncoder<T>::forward_with_weights<N>(             \
        const Var<T, N>&, const nn::EncoderForwardOptions<T, N>&) const;                                            \
    EXTERN template nn::TransformerStackOutput<T, N> nn::TransformerDecoder<T>::forward_with_weights<N>(             \
        const Var<T, N>&, const Var<T, N>&, const nn::DecoderForwardOptions<T, N>&) const;                          \
    EXTERN template Var<T, N> nn::Transformer<T>::forward<N>(const Var<T, N>&, const Var<T, N>&,                      \
                                                            const nn::TransformerForwardOptions<T>&) const;
#define XGRAD_PRECOMPILED_TRANSFORMER(EXTERN, T)                  \
    EXTERN template struct nn::TransformerEncoderLayer<T>;        \
    EXTERN template struct nn::TransformerDecoderLayer<T>;        \
    EXTERN template struct nn::TransformerEncoder<T>;             \
    EXTERN template struct nn::TransformerDecoder<T>;             \
    EXTERN template struct nn::Transformer<T>;                    \
    XGRAD_DETAIL_PRECOMPILED_TRANSFORMER_RANK(EXTERN, T, 2)       \
    XGRAD_DETAIL_PRECOMPILED_TRANSFORMER_RANK(EXTERN, T, 3)

// nn::GPT: construction, forward (training and cached), loss and sampling.
#define XGRAD_PRECOMPILED_GPT(EXTERN, T)                                                                            \
    EXTERN template struct nn::GPTSelfAttention<T>;                                                                 \
    EXTERN template struct nn::GPT<T>;                                                                              \
    EXTERN template Var<T, 0> nn::gpt_loss<T>(const Var<T, 3>&, const xt::xtensor<std::int64_t, 2>&);               \
    EXTERN template Var<T, 0> linear_cross_entropy<T, 3>(const Var<T, 3>&, const Var<T, 2>&,                        \
                                                         const xt::xtensor<std::int64_t, 2>&,                         \
                                                         const LinearCrossEntropyOptions&);                           \
    EXTERN template xt::xtensor<std::int64_t, 2> nn::generate<nn::GPT<T>>(                                           \
        const nn::GPT<T>&, const xt::xtensor<std::int64_t, 2>&, std::size_t, Generator&, const nn::GenerateOptions&);

// nn::Llama: construction, forward (training and cached), loss and sampling.
#define XGRAD_PRECOMPILED_LLAMA(EXTERN, T)                                                                     \
    EXTERN template struct nn::LlamaAttention<T>;                                                              \
    EXTERN template struct nn::Llama<T>;                                                                       \
    EXTERN template xt::xtensor<std::int64_t, 2> nn::generate<nn::Llama<T>>(                                   \
        const nn::Llama<T>&, const xt::xtensor<std::int64_t, 2>&, std::size_t, Generator&, const nn::GenerateOptions&);

// The optimizers' update loops and checks, and gradient clipping.
#define XGRAD_PRECOMPILED_OPTIM(EXTERN, T)                                          \
    EXTERN template class optim::Optimizer<T>;                                      \
    EXTERN template class optim::detail::AdamFamily<T, optim::AdamOptions, false>;  \
    EXTERN template class optim::detail::AdamFamily<T, optim::AdamWOptions, true>;  \
    EXTERN template class optim::Adam<T>;                                           \
    EXTERN template class optim::AdamW<T>;                                          \
    EXTERN template class optim::SGD<T>;                                            \
    EXTERN template double optim::clip_grad_norm<T>(const std::vector<ParameterRef<T>>&, double, double, bool);

// ---- the declarations, when libxgrad fits this program ----

// xtensor's alignment for this compilation's SIMD level, by the compiler's own macros (a
// static_assert below checks it against xtensor's).
#if defined(__AVX512F__)
#define XGRAD_DETAIL_SIMD_ALIGNMENT 64
#elif defined(__AVX__)
#define XGRAD_DETAIL_SIMD_ALIGNMENT 32
#else
#define XGRAD_DETAIL_SIMD_ALIGNMENT 16
#endif

#if defined(XGRAD_LIBRARY_SIMD_ALIGNMENT) && defined(XTENSOR_USE_XSIMD) && \
    XGRAD_LIBRARY_SIMD_ALIGNMENT == XGRAD_DETAIL_SIMD_ALIGNMENT
// 1 when this program uses libxgrad's compiled code, else 0.
#define XGRAD_PRECOMPILED 1
static_assert(XTENSOR_DEFAULT_ALIGNMENT == XGRAD_LIBRARY_SIMD_ALIGNMENT,
              "xgrad: xgrad/precompiled.hpp misjudged xtensor's alignment for this SIMD level; compile without "
              "XGRAD_LIBRARY_SIMD_ALIGNMENT (xgrad then compiles everything in your program) and report it");
namespace xgrad {
XGRAD_PRECOMPILED_KERNELS(extern, float)
XGRAD_PRECOMPILED_KERNELS(extern, double)
XGRAD_PRECOMPILED_KERNELS_BFLOAT16(extern)
XGRAD_PRECOMPILED_OPS(extern, float)
XGRAD_PRECOMPILED_OPS(extern, double)
XGRAD_PRECOMPILED_NN(extern, float)
XGRAD_PRECOMPILED_NN(extern, double)
XGRAD_PRECOMPILED_TRANSFORMER(extern, float)
XGRAD_PRECOMPILED_TRANSFORMER(extern, double)
XGRAD_PRECOMPILED_GPT(extern, float)
XGRAD_PRECOMPILED_GPT(extern, double)
XGRAD_PRECOMPILED_LLAMA(extern, float)
XGRAD_PRECOMPILED_LLAMA(extern, double)
XGRAD_PRECOMPILED_OPTIM(extern, float)
XGRAD_PRECOMPILED_OPTIM(extern, double)
}  // namespace xgrad
#else
#define XGRAD_PRECOMPILED 0
#endif
