// Rotary position embedding (RoPE; Su et al. 2021, arXiv 2104.09864), as the Llama family applies it
// to queries and keys: each head's vector is cut into D/2 pairs, and pair i at position p is turned
// by the angle p·θ_i, θ_i = theta^(−2i/D).
//
//   auto tables = rotary_tables<float>(head_dim, max_positions);          // theta 10000: Llama 2
//   q = rotary_embedding(q, tables);                                      // q (B, T, H, D)
//   k = rotary_embedding(k, tables, cache_length);                        // positions from cache_length
//
// Two ways to pair a vector's elements, which published weights assume:
//   interleaved  (x[2i], x[2i+1]): Meta's Llama code, llama2.c (its complex view of the vector)
//   halves       (x[i], x[i + D/2]): Hugging Face's rotate_half (GPT-NeoX); Hugging Face's Llama
//                checkpoints permute wq and wk's rows so that this gives Meta's model.
#pragma once
#include <cmath>
#include <cstddef>
#include <string>

#include <xtensor/xnoalias.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "xgrad/core/var.hpp"

namespace xgrad {

enum class RotaryStyle { interleaved, halves };

// cos and sin of every position's angles: (positions, D/2) each.
template <Real T>
struct RotaryTables {
    xt::xtensor<T, 2> cos, sin;
    std::size_t positions() const { return cos.shape(0); }
    std::size_t head_dim() const { return 2 * cos.shape(1); }
};

// The tables for positions [0, positions), computed in T's arithmetic step by step as llama2.c and
// Hugging Face do in float32: θ_i = 1 / theta^(2i/D), angle = p · θ_i, then cos and sin.
template <Real T>
RotaryTables<T> rotary_tables(std::size_t head_dim, std::size_t positions, double theta = 10000.0) {
    if (head_dim == 0 || head_dim % 2 != 0)
        throw value_error("rotary_tables: head_dim must be even and positive, got " + std::to_string(head_dim));
    if (!(theta > 0)) throw value_error("rotary_tables: theta must be positive, got " + std::to_string(theta));
    const std::size_t half = head_dim / 2;
    RotaryTables<T> t{xt::xtensor<T, 2>::from_shape({positions, half}), xt::xtensor<T, 2>::from_shape({positions, half})};
    for (std::size_t i = 0; i < half; ++i) {
        const T frequency = T(1) / std::pow(T(theta), T(2 * i) / T(head_dim));
        for (std::size_t p = 0; p < positions; ++p) {
            const T angle = T(p) * frequency;
            t.cos(p, i) = std::cos(angle), t.sin(p, i) = std::sin(angle);
        }
    }
    return t;
}

namespace detail {

// Y (B, T, H, D): each pair (a, b) of X at position p turned by its angle:
//   y_a = a cos − b sin,  y_b = a sin + b cos
template <Real T>
class RotaryNode final : public OpNode<RotaryNode<T>, T, 4> {
public:
    Var<T, 4> x;
    xt::xtensor<T, 2> cos, sin;  // the rows of this call's positions: (T, D/2)
    RotaryStyle style = RotaryStyle::interleaved;

    const char* op_name() const override { return "rotary_embedding"; }
    auto inputs() { return std::tie(x); }

    // Calls turn(a, b, c, s) for every pair of every head: a and b the pair's offsets in a row of
    // (B·T·H, D), c and s its cos and sin.
    template <class F>
    void each_pair(const F& turn) const {
        const auto& shape = x.shape();
        const std::size_t B = shape[0], L = shape[1], H = shape[2], D = shape[3], half = D / 2;
        // pair i: elements (i·step, i·step + apart) of a head's row
        const bool interleaved = style == RotaryStyle::interleaved;
        const std::size_t step = interleaved ? 2 : 1, apart = interleaved ? 1 : half;
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t t = 0; t < L; ++t) {
                const T* c = cos.data() + t * half;
                const T* s = sin.data() + t * half;
                for (std::size_t h = 0; h < H; ++h) {
                    const std::size_t row = ((b * L + t) * H + h) * D;
                    for (std::size_t i = 0; i < half; ++i) turn(row + i * step, row + i * step + apart, c[i], s[i]);
                }
            }
    }

    void forward() {
        const T* in = x.value().data();
        T* out = this->value.data();
        each_pair([&](std::size_t a, std::size_t b, T c, T s) {
            out[a] = in[a] * c - in[b] * s;
            out[b] = in[a] * s + in[b] * c;
        });
    }

    void backward() override {
        if (!x.requires_grad()) return;
        // dX = the rotation's transpose (the angle negated) applied to dY:
        //   dx_a += dy_a cos + dy_b sin,  dx_b += −dy_a sin + dy_b cos
        const T* gy = this->grad_buffer().data();
        T* gx = x.node()->grad_buffer().data();
        each_pair([&](std::size_t a, std::size_t b, T c, T s) {
            gx[a] += gy[a] * c + gy[b] * s;
            gx[b] += gy[b] * c - gy[a] * s;
        });
    }
};

}  // namespace detail

// rotary_embedding(x (B, T, H, D), tables, first_position = 0, style): x's position t is
// first_position + t (a key/value cache's length when decoding); the tables must cover
// first_position + T positions and have head_dim D.
template <Real T>
Var<T, 4> rotary_embedding(const Var<T, 4>& x, const RotaryTables<T>& tables, std::size_t first_position = 0,
                           RotaryStyle style = RotaryStyle::interleaved) {
    require_var(x, "rotary_embedding", "x");
    const auto& shape = x.shape();
    if (shape[3] != tables.head_dim())
        throw shape_error("rotary_embedding: x " + shape_str(shape) + " (B, T, H, D) has D " + std::to_string(shape[3]) +
                          ", the tables are for head_dim " + std::to_string(tables.head_dim()));
    if (first_position + shape[1] > tables.positions())
        throw value_error("rotary_embedding: positions " + std::to_string(first_position) + " to " +
                          std::to_string(first_position + shape[1] - 1) + " of x " + shape_str(shape) +
                          " are past the tables' " + std::to_string(tables.positions()) + " positions");
    // the rows of this call's positions, into the node's buffers (a reused node keeps them: a steady
    // step allocates nothing)
    const auto take_rows = [&](xt::xtensor<T, 2>& rows, const xt::xtensor<T, 2>& table) {
        xt::noalias(rows) = xt::view(table, xt::range(first_position, first_position + shape[1]), xt::all());
    };
    return make_op<detail::RotaryNode<T>>(
        shape,
        [&](auto& node) {
            take_rows(node.cos, tables.cos), take_rows(node.sin, tables.sin), node.style = style;
            node.forward();
        },
        x);
}

template <LazyExpression E, class... Args>
auto rotary_embedding(const E& e, const Args&... args) {
    return rotary_embedding(eval(e), args...);
}

}  // namespace xgrad
