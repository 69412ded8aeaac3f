// Embedding lookup (torch.nn.functional.embedding): gathers rows of a weight table (V, E) by
// integer indices of any rank M, giving (indices..., E). Backward scatter-adds the output gradient
// back into the looked-up rows; repeated indices accumulate, and padding_idx's row gets nothing.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad {

namespace detail {

// Y (indices..., E) [k, :] = W (V, E) [rows[k], :]
template <Real T, std::size_t M>
class EmbeddingNode final : public OpNode<EmbeddingNode<T, M>, T, M + 1> {
public:
    Var<T, 2> weight;
    std::vector<std::size_t> rows;     // one validated row per lookup, flattened over the indices
    std::optional<std::size_t> padding;  // this row receives no gradient

    const char* op_name() const override { return "embedding"; }
    auto inputs() { return std::tie(weight); }

    void forward() {
        const std::size_t E = weight.shape(1);
        const T* w = weight.value().data();
        T* dst = this->value.data();
        for (std::size_t k = 0; k < rows.size(); ++k) {
            const T* src = w + rows[k] * E;
            for (std::size_t e = 0; e < E; ++e) dst[k * E + e] = src[e];
        }
    }

    void backward() override {
        if (!weight.requires_grad()) return;
        // dW (V, E) [rows[k], :] += dY (K, E) [k, :]   for every lookup k with rows[k] != padding
        const std::size_t E = weight.shape(1);
        const T* gy = this->grad_buffer().data();
        T* gw = weight.node()->grad_buffer().data();
        for (std::size_t k = 0; k < rows.size(); ++k) {
            if (padding && rows[k] == *padding) continue;
            T* dst = gw + rows[k] * E;
            for (std::size_t e = 0; e < E; ++e) dst[e] += gy[k * E + e];
        }
    }
};

// "(1, 2)": the multi-index of flat position k in `shape`.
template <class S>
std::string index_position(const S& shape, std::size_t k) {
    std::vector<std::size_t> at(shape.size());
    for (std::size_t d = shape.size(); d-- > 0;) {
        at[d] = shape[d] ? k % shape[d] : 0;
        k = shape[d] ? k / shape[d] : 0;
    }
    return shape_str(at);
}

// torch semantics: a negative padding_idx counts from the end; it must name a row of the table.
inline std::optional<std::size_t> resolve_padding(std::optional<long> padding_idx, std::size_t V, const char* op) {
    if (!padding_idx) return std::nullopt;
    const long p = *padding_idx < 0 ? *padding_idx + long(V) : *padding_idx;
    if (p < 0 || p >= long(V))
        throw value_error(std::string(op) + ": padding_idx " + std::to_string(*padding_idx) +
                          " is out of range for " + std::to_string(V) + " embeddings");
    return std::size_t(p);
}

}  // namespace detail

// embedding(weight (V, E), indices (d0, ..., d_{M-1})) -> (d0, ..., d_{M-1}, E).
// Every index must lie in [0, V) (value_error naming the index and its position otherwise).
// padding_idx (negative counts from the end): that row's lookups pass no gradient to the weight.
template <Real T, std::size_t M>
Var<T, M + 1> embedding(const Var<T, 2>& weight, const xt::xtensor<std::int64_t, M>& indices,
                        std::optional<long> padding_idx = std::nullopt) {
    require_var(weight, "embedding", "weight");
    const std::size_t V = weight.shape(0), E = weight.shape(1);
    const auto padding = detail::resolve_padding(padding_idx, V, "embedding");
    const std::int64_t* idx = indices.data();
    for (std::size_t k = 0; k < indices.size(); ++k)  // validate before recording anything
        if (idx[k] < 0 || std::uint64_t(idx[k]) >= V)
            throw value_error("embedding: index " + std::to_string(idx[k]) + " at position " +
                              detail::index_position(indices.shape(), k) + " of indices " +
                              shape_str(indices.shape()) + " is out of range [0, " + std::to_string(V) +
                              ") for weight " + shape_str(weight.shape()));
    std::array<std::size_t, M + 1> shape;
    for (std::size_t d = 0; d < M; ++d) shape[d] = indices.shape()[d];
    shape[M] = E;
    return make_op<detail::EmbeddingNode<T, M>>(shape, [&](auto& node) {
        node.rows.assign(idx, idx + indices.size());
        node.padding = padding;
        node.forward();
    }, weight);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp): lookups of token ids of rank 1 and 2.
namespace xgrad {
#define XGRAD_DETAIL_EMBEDDING_COMPILED(EXTERN, T)                                                                 \
    EXTERN template Var<T, 2> embedding<T, 1>(const Var<T, 2>&, const xt::xtensor<std::int64_t, 1>&,               \
                                              std::optional<long>);                                                \
    EXTERN template Var<T, 3> embedding<T, 2>(const Var<T, 2>&, const xt::xtensor<std::int64_t, 2>&,               \
                                              std::optional<long>);
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_EMBEDDING_COMPILED)
#undef XGRAD_DETAIL_EMBEDDING_COMPILED
}  // namespace xgrad
