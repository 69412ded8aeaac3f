// nn layers besides Linear: Embedding, LayerNorm, Dropout, PositionalEncoding (PyTorch semantics
// and initialization). Each is a Hana-reflected module (see nn/module.hpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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
              std::optional<long> padding = std::nullopt) {
        if (num_embeddings == 0 || embedding_dim == 0)
            throw value_error("Embedding: num_embeddings and embedding_dim must be positive, got " +
                              std::to_string(num_embeddings) + " and " + std::to_string(embedding_dim));
        if (const auto p = xgrad::detail::resolve_padding(padding, num_embeddings, "Embedding")) padding_idx = long(*p);
        weight = parameter(xt::xtensor<T, 2>::from_shape({num_embeddings, embedding_dim}));
        init::normal_(weight, 0, 1, gen);
        if (padding_idx)
            for (std::size_t e = 0; e < embedding_dim; ++e) weight.value()(std::size_t(*padding_idx), e) = T(0);
    }

    // indices (d0, ..., d_{M-1}) -> (d0, ..., d_{M-1}, embedding_dim)
    template <std::size_t M>
    Var<T, M + 1> operator()(const xt::xtensor<std::int64_t, M>& indices) const {
        return embedding(weight, indices, padding_idx);
    }
    std::size_t num_embeddings() const { return weight.shape(0); }
    std::size_t embedding_dim() const { return weight.shape(1); }
};

// nn.LayerNorm over the last axis (normalized_shape = (C,)): weight ones, bias zeros.
template <Real T>
struct LayerNorm {
    BOOST_HANA_DEFINE_STRUCT(LayerNorm, (Var<T, 1>, weight), (Var<T, 1>, bias));
    double eps = 1e-5;

    LayerNorm() = default;
    explicit LayerNorm(std::size_t normalized_dim, double eps_ = 1e-5, bool elementwise_affine = true) : eps(eps_) {
        if (normalized_dim == 0) throw value_error("LayerNorm: normalized_dim must be positive");
        if (!(eps_ >= 0)) throw value_error("LayerNorm: eps must be >= 0, got " + std::to_string(eps_));
        if (elementwise_affine) {
            weight = parameter(xt::xtensor<T, 1>(xt::ones<T>({normalized_dim})));
            bias = parameter(xt::xtensor<T, 1>(xt::zeros<T>({normalized_dim})));
        }
    }

    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        return weight ? layer_norm(x, weight, bias, eps) : layer_norm(x, eps);
    }
};

// nn.Dropout: zeros elements with probability p while `training` (set_training flips it).
// Draws from its own Generator (seeded) or from a shared one the caller keeps alive.
struct Dropout {
    BOOST_HANA_DEFINE_STRUCT(Dropout);
    double p = 0.5;
    bool training = true;
    std::shared_ptr<Generator> gen = std::make_shared<Generator>();

    Dropout() = default;
    explicit Dropout(double p_, std::uint64_t seed = Generator::default_seed)
        : p(check(p_)), gen(std::make_shared<Generator>(seed)) {}
    // Shares `shared` (not owned: it must outlive this module and its copies).
    Dropout(double p_, Generator& shared) : p(check(p_)), gen(std::shared_ptr<Generator>(), &shared) {}

    template <Real T, std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        return dropout(x, p, training, *gen);
    }

private:
    static double check(double p) {
        if (!(p >= 0 && p <= 1)) throw value_error("Dropout: probability p must be in [0, 1], got " + std::to_string(p));
        return p;
    }
};

// Sinusoidal positional encoding ("Attention Is All You Need", d2l): a constant table
//   P[pos, 2i] = sin(pos / 10000^(2i/d)),  P[pos, 2i+1] = cos(pos / 10000^(2i/d))
// added to x (..., T, d) for T <= max_len, followed by dropout. It has no parameters.
template <Real T>
struct PositionalEncoding {
    BOOST_HANA_DEFINE_STRUCT(PositionalEncoding, (Dropout, dropout));
    xt::xtensor<T, 2> table;  // (max_len, d)

    PositionalEncoding() = default;
    PositionalEncoding(std::size_t d_model, double dropout_p, std::size_t max_len = 1000,
                       std::uint64_t seed = Generator::default_seed)
        : dropout(dropout_p, seed) {
        fill(d_model, max_len);
    }
    PositionalEncoding(std::size_t d_model, double dropout_p, Generator& gen, std::size_t max_len = 1000)
        : dropout(dropout_p, gen) {
        fill(d_model, max_len);
    }

    // x (..., T, d) -> dropout(x + P[:T]) with the same shape
    template <std::size_t N>
    Var<T, N> operator()(const Var<T, N>& x) const {
        static_assert(N >= 2, "xgrad: PositionalEncoding needs an input of rank >= 2 (..., T, d)");
        if (table.size() == 0)
            throw value_error("PositionalEncoding: the module has no table (construct it with d_model and max_len)");
        xgrad::detail::require_var(x, "PositionalEncoding", "x");
        const std::size_t steps = x.shape(N - 2), d = x.shape(N - 1);
        if (d != table.shape(1) || steps > table.shape(0))
            throw shape_error("PositionalEncoding: x " + shape_str(x.shape()) + " must be (..., T, " +
                              std::to_string(table.shape(1)) + ") with T <= max_len " +
                              std::to_string(table.shape(0)));
        xt::xtensor<T, 2> rows = xt::xtensor<T, 2>::from_shape({steps, d});
        std::copy(table.data(), table.data() + steps * d, rows.data());
        Var<T, N> y = x + constant(std::move(rows));
        return dropout(y);
    }

private:
    void fill(std::size_t d, std::size_t max_len) {
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
};

}  // namespace xgrad::nn
