// nn layers besides Linear: Embedding, LayerNorm, RMSNorm, Dropout, PositionalEncoding (PyTorch
// semantics and initialization). Each is a Hana-reflected module (see nn/module.hpp).
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/embedding.hpp"
#include "xgrad/ops/norm.hpp"

namespace xgrad::nn {

// nn.Embedding: a (num_embeddings, embedding_dim) table ~ N(0, 1); the padding row starts at zero
// and receives no gradient.
template <Real T>
struct Embedding {
    BOOST_HANA_DEFINE_STRUCT(Embedding, (Var<T, 2>, weight));
    std::optional<long> padding_idx;  // resolved to [0, V) by the constructor

    Embedding() = default;
    Embedding(std::size_t num_embeddings, std::size_t embedding_dim, Generator& gen,
              std::optional<long> padding = std::nullopt);

    // indices (d0, ..., d_{M-1}) -> (d0, ..., d_{M-1}, embedding_dim)
    template <std::size_t M>
    Var<T, M + 1> operator()(const xt::xtensor<std::int64_t, M>& indices) const {
        return embedding(weight, indices, padding_idx);
    }
    template <class X>
    Var<T, 3> operator()(const X&) const {
        static_assert(xgrad::detail::always_false<X>,
                      "xgrad: Embedding takes integer indices, an xt::xtensor<std::int64_t, M>; this argument is not one");
        return {};
    }
    std::size_t num_embeddings() const { return weight.shape(0); }
    std::size_t embedding_dim() const { return weight.shape(1); }
};

// nn.LayerNorm over the last axis (normalized_shape = (C,)): weight ones, bias zeros (no bias
// with bias = false, as torch 2.1's LayerNorm(bias=False) and nanoGPT's LayerNorm).
template <Real T>
struct LayerNorm {
    BOOST_HANA_DEFINE_STRUCT(LayerNorm, (Var<T, 1>, weight), (Var<T, 1>, bias));
    double eps = 1e-5;

    LayerNorm() = default;
    explicit LayerNorm(std::size_t normalized_dim, double eps_ = 1e-5, bool elementwise_affine = true,
                       bool with_bias = true);

    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        return weight ? layer_norm(x, weight, bias, eps) : layer_norm(x, eps);
    }
    template <class X>  // an expression (one node), or one readable error (nn/module.hpp)
    auto operator()(const X& x) const {
        return (*this)(xgrad::detail::module_input<T>(x));
    }
};

// nn.RMSNorm over the last axis (normalized_shape = (C,)): weight ones; eps unset takes the machine
// epsilon of T, as torch (Llama's configs give rms_norm_eps 1e-5 or 1e-6).
template <Real T>
struct RMSNorm {
    BOOST_HANA_DEFINE_STRUCT(RMSNorm, (Var<T, 1>, weight));
    std::optional<double> eps;

    RMSNorm() = default;
    explicit RMSNorm(std::size_t normalized_dim, std::optional<double> eps_ = std::nullopt, bool elementwise_affine = true);

    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        const double e = eps.value_or(std::numeric_limits<T>::epsilon());
        return weight ? rms_norm(x, weight, e) : rms_norm(x, e);
    }
    template <class X>  // an expression (one node), or one readable error (nn/module.hpp)
    auto operator()(const X& x) const {
        return (*this)(xgrad::detail::module_input<T>(x));
    }
};

// nn.Dropout: zeros elements with probability p while `training` (set_training flips it).
// Draws from its own generator, made at construction: from a seed, or seeded by one draw from a
// generator (modules built from one generator get distinct streams, reproducible from its seed).
// A plain copy shares the generator (it is the same layer); nn::clone makes a new one.
struct Dropout {
    BOOST_HANA_DEFINE_STRUCT(Dropout, (std::shared_ptr<Generator>, generator));
    double p = 0.5;
    bool training = true;

    Dropout() : generator(std::make_shared<Generator>()) {}
    Dropout(double p_, std::uint64_t seed) : generator(std::make_shared<Generator>(seed)), p(check(p_)) {}
    Dropout(double p_, Generator& seed_source)
        : generator(std::make_shared<Generator>(seed_source.engine()())), p(check(p_)) {}

    template <Real T, std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        if (!generator) throw value_error("Dropout: the module has no generator");
        return dropout(x, p, training, *generator);
    }
    template <class X>  // an expression (one node), or one readable error (nn/module.hpp)
    auto operator()(const X& x) const {
        return (*this)(xgrad::detail::module_input<void>(x));
    }
    // residual + (*this)(x) in one node and one pass (add_dropout), the same mask: a residual connection.
    template <Real T, std::size_t N>
    Var<T, N> add(const Var<T, N>& residual, const Var<T, N>& x) const {
        if (!generator) throw value_error("Dropout: the module has no generator");
        return add_dropout(residual, x, p, training, *generator);
    }

private:
    static double check(double p) {
        if (!(p >= 0 && p <= 1)) throw value_error("Dropout: probability p must be in [0, 1], got " + std::to_string(p));
        return p;
    }
};

// The construction options of nn::PositionalEncoding. The layout is explicit, as in
// MultiheadAttention: (T, N, d) by default, (N, T, d) when batch_first; (T, d) unbatched.
struct PositionalEncodingOptions {
    std::size_t d_model = 0;
    double dropout = 0.1;
    bool batch_first = false;
    std::size_t max_len = 1000;
};

// Sinusoidal positional encoding ("Attention Is All You Need", d2l): a constant table
//   P[pos, 2i] = sin(pos / 10000^(2i/d)),  P[pos, 2i+1] = cos(pos / 10000^(2i/d))
// added to x along its sequence axis (T <= max_len), followed by dropout. It has no parameters.
template <Real T>
struct PositionalEncoding {
    BOOST_HANA_DEFINE_STRUCT(PositionalEncoding, (Dropout, dropout));
    PositionalEncodingOptions options;
    xt::xtensor<T, 2> table;  // (max_len, d)

    PositionalEncoding() = default;
    // The dropout's generator: seeded by `seed`, or by one draw from `seed_source`.
    PositionalEncoding(const PositionalEncodingOptions& o, std::uint64_t seed);
    PositionalEncoding(const PositionalEncodingOptions& o, Generator& seed_source);

    // x (T, N, d) / (N, T, d) if batch_first / (T, d) -> dropout(x + P[:T]) with the same shape
    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        static_assert(N == 2 || N == 3,
                      "xgrad: PositionalEncoding takes a batched (rank 3) or unbatched (rank 2) input, like MultiheadAttention");
        if (table.size() == 0)
            throw value_error("PositionalEncoding: the module has no table (construct it with options)");
        xgrad::require_var(x, "PositionalEncoding", "x");
        const std::size_t seq_axis = N == 3 && options.batch_first ? 1 : 0;
        const std::size_t steps = x.shape(seq_axis), d = x.shape(N - 1);
        if (d != table.shape(1) || steps > table.shape(0))
            throw shape_error("PositionalEncoding: x " + shape_str(x.shape()) + " must be " +
                              (N == 2 ? "(T, d)" : options.batch_first ? "(N, T, d) (batch_first)" : "(T, N, d)") +
                              " with d = " + std::to_string(table.shape(1)) + " and T <= max_len " +
                              std::to_string(table.shape(0)));
        // (T, d) rows, broadcast over N: as (T, d) against (N, T, d), as (T, 1, d) against (T, N, d)
        if constexpr (N == 3)
            if (!options.batch_first) return dropout(x + constant(rows<3>(steps, {steps, 1, d})));
        return dropout(x + constant(rows<2>(steps, {steps, d})));
    }
    template <class X>  // an expression (one node), or one readable error (nn/module.hpp)
    auto operator()(const X& x) const {
        return (*this)(xgrad::detail::module_input<T>(x));
    }

private:
    // The table's first `steps` rows, shaped `shape`.
    template <std::size_t R>
    xt::xtensor<T, R> rows(std::size_t steps, const std::array<std::size_t, R>& shape) const {
        auto out = xt::xtensor<T, R>::from_shape(shape);
        std::copy(table.data(), table.data() + steps * table.shape(1), out.data());
        return out;
    }
    void fill();
};

// ---- the constructors, out of the classes: libxgrad compiles them once (XGRAD_COMPILED_IN below) ----

template <Real T>
Embedding<T>::Embedding(std::size_t num_embeddings, std::size_t embedding_dim, Generator& gen,
                        std::optional<long> padding) {
    if (num_embeddings == 0 || embedding_dim == 0)
        throw value_error("Embedding: num_embeddings and embedding_dim must be positive, got " +
                          std::to_string(num_embeddings) + " and " + std::to_string(embedding_dim));
    if (const auto p = xgrad::detail::resolve_padding(padding, num_embeddings, "Embedding")) padding_idx = long(*p);
    weight = parameter(xt::xtensor<T, 2>::from_shape({num_embeddings, embedding_dim}));
    init::normal_(weight, 0, 1, gen);
    if (padding_idx)
        for (std::size_t e = 0; e < embedding_dim; ++e) weight.value()(std::size_t(*padding_idx), e) = T(0);
}

template <Real T>
LayerNorm<T>::LayerNorm(std::size_t normalized_dim, double eps_, bool elementwise_affine, bool with_bias) : eps(eps_) {
    if (normalized_dim == 0) throw value_error("LayerNorm: normalized_dim must be positive");
    if (!(eps_ >= 0)) throw value_error("LayerNorm: eps must be >= 0, got " + std::to_string(eps_));
    if (elementwise_affine) {
        weight = parameter(xt::xtensor<T, 1>(xt::ones<T>({normalized_dim})));
        if (with_bias) bias = parameter(xt::xtensor<T, 1>(xt::zeros<T>({normalized_dim})));
    }
}

template <Real T>
RMSNorm<T>::RMSNorm(std::size_t normalized_dim, std::optional<double> eps_, bool elementwise_affine) : eps(eps_) {
    if (normalized_dim == 0) throw value_error("RMSNorm: normalized_dim must be positive");
    if (eps && !(*eps >= 0)) throw value_error("RMSNorm: eps must be >= 0, got " + std::to_string(*eps));
    if (elementwise_affine) weight = parameter(xt::xtensor<T, 1>(xt::ones<T>({normalized_dim})));
}

template <Real T>
PositionalEncoding<T>::PositionalEncoding(const PositionalEncodingOptions& o, std::uint64_t seed)
    : dropout(o.dropout, seed), options(o) {
    fill();
}
template <Real T>
PositionalEncoding<T>::PositionalEncoding(const PositionalEncodingOptions& o, Generator& seed_source)
    : dropout(o.dropout, seed_source), options(o) {
    fill();
}
template <Real T>
void PositionalEncoding<T>::fill() {
    const std::size_t d = options.d_model, max_len = options.max_len;
    if (d == 0 || max_len == 0)
        throw value_error("PositionalEncoding: d_model and max_len must be positive, got " + std::to_string(d) +
                          " and " + std::to_string(max_len));
    table = xt::xtensor<T, 2>::from_shape({max_len, d});
    for (std::size_t pos = 0; pos < max_len; ++pos)
        for (std::size_t j = 0; j < d; j += 2) {
            const double angle = double(pos) / std::pow(10000.0, double(j) / double(d));
            table(pos, j) = T(std::sin(angle));
            if (j + 1 < d) table(pos, j + 1) = T(std::cos(angle));
        }
}

}  // namespace xgrad::nn

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the layers' constructors, and
// named_parameters' walk of each.
namespace xgrad {
#define XGRAD_DETAIL_LAYERS_COMPILED(EXTERN, T)                  \
    EXTERN template struct nn::Embedding<T>;                      \
    EXTERN template struct nn::LayerNorm<T>;                      \
    EXTERN template struct nn::RMSNorm<T>;                        \
    EXTERN template struct nn::PositionalEncoding<T>;             \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::Embedding<T>, T)      \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::LayerNorm<T>, T)      \
    XGRAD_DETAIL_PARAMETER_WALK(EXTERN, nn::RMSNorm<T>, T)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_LAYERS_COMPILED)
#undef XGRAD_DETAIL_LAYERS_COMPILED
}  // namespace xgrad
