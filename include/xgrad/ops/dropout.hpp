// Inverted dropout (torch.nn.functional.dropout): while training, each element is zeroed with
// probability p and the kept ones are scaled by 1/(1-p), so the expected value is unchanged. The
// mask comes from a counter-based generator (core/philox.hpp) keyed by the Generator's seed, at an
// offset drawn from it once per call: the same seed gives the same masks, on any number of threads.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/expr.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/core/philox.hpp"
#include "xgrad/core/random.hpp"

namespace xgrad {

namespace detail {

// The random draws of one dropout call (docs/ops.md, "Dropout"): element i is kept when word
// ⌊(i mod 256) / 64⌋ of the Philox4x32-10 block at counter (n, offset), n = 64·⌊i/256⌋ + i mod 64,
// under the generator's stream_key() as key (its seed on stream 0, the default), is at least
// `threshold` = ⌈p · 2³²⌉. 64 counters give 256 consecutive elements, word by word, so the mask is
// a pure function of (key, offset, i): the same for any split of the elements over threads, and computed 64 blocks at a time.
struct DropoutDraw {
    static constexpr std::size_t lanes = 64, group = 4 * lanes;  // Philox blocks and elements per group

    philox::Key key;
    std::uint64_t offset = 0;     // one draw from the generator per call
    std::uint32_t threshold = 0;  // > 0: p > 0 (p = 0 records no node)
    bool drop_all = false;        // p = 1, or p so close to 1 that ⌈p · 2³²⌉ = 2³²

    DropoutDraw(double p, Generator& gen) {
        const std::uint64_t seed = gen.stream_key();
        key = {std::uint32_t(seed), std::uint32_t(seed >> 32)};
        offset = gen.engine()();
        const double t = std::ceil(std::ldexp(p, 32));
        drop_all = t >= 0x1p32;
        threshold = drop_all ? 0 : std::uint32_t(t);
    }

    // m[i] = keep_scale (kept) or 0 and y[i] = r[i] + x[i] · m[i] for i in [begin, end) (r null: 0)
    template <Real T>
    void apply(T keep_scale, const T* x, const T* r, T* y, T* m, std::size_t begin, std::size_t end) const {
        if (drop_all) {
            for (std::size_t i = begin; i < end; ++i) m[i] = T(0), y[i] = (r ? r[i] : T(0)) + x[i] * T(0);  // inf · 0 = NaN, as torch
            return;
        }
        std::array<std::array<std::uint32_t, lanes>, 4> words;
        for (std::size_t g = begin / group; g * group < end; ++g) {
            const std::uint64_t n = lanes * std::uint64_t(g);
            philox::blocks<lanes>(std::uint32_t(n), std::uint32_t(n >> 32), std::uint32_t(offset),
                                  std::uint32_t(offset >> 32), key, words);
            const std::size_t base = g * group, from = std::max(begin, base), to = std::min(end, base + group);
            for (std::size_t w = 0; w < 4; ++w) {
                const std::size_t first = base + w * lanes;  // word w of the 64 blocks: elements [first, first + 64)
                const std::size_t lo = std::clamp(from, first, first + lanes), hi = std::clamp(to, first, first + lanes);
                const std::uint32_t* u = words[w].data();
                if (r)
                    for (std::size_t i = lo; i < hi; ++i) {
                        const T mi = u[i - first] >= threshold ? keep_scale : T(0);
                        m[i] = mi, y[i] = r[i] + x[i] * mi;
                    }
                else
                    for (std::size_t i = lo; i < hi; ++i) {
                        const T mi = u[i - first] >= threshold ? keep_scale : T(0);
                        m[i] = mi, y[i] = x[i] * mi;
                    }
            }
        }
    }
};

// y = x ⊙ m, or with a residual r: y = r + x ⊙ m (a Transformer layer's residual connection in
// one pass), with m[i] = 1/(1-p) (kept) or 0 (dropped), drawn once in forward.
template <Real T, std::size_t N>
class DropoutNode final : public OpNode<DropoutNode<T, N>, T, N> {
public:
    Var<T, N> x, residual;  // residual empty: plain dropout
    std::vector<T> multiplier;  // the scaled mask, reused by backward

    const char* op_name() const override { return residual ? "add_dropout" : "dropout"; }
    auto inputs() { return std::tie(x, residual); }

    void forward(double p, Generator& gen) {
        const std::size_t n = x.size();
        multiplier.resize(n);
        const DropoutDraw draw(p, gen);
        const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
        const T* src = x.value().data();
        const T* r = residual ? residual.value().data() : nullptr;
        T* dst = this->value.data();
        T* m = multiplier.data();
        parallel_for(n, dropout_flops * double(n),
                     [&](std::size_t begin, std::size_t end) { draw.apply(keep_scale, src, r, dst, m, begin, end); });
    }

    void backward() override {
        // dX (shape of x) += dY (shape of x) ⊙ m (same mask as forward);  dR (shape of x) += dY
        const T* gy = this->grad_buffer().data();
        T* gx = x.requires_grad() ? x.node()->grad_buffer().data() : nullptr;
        T* gr = residual && residual.requires_grad() ? residual.node()->grad_buffer().data() : nullptr;
        const T* m = multiplier.data();
        parallel_for(multiplier.size(), 8.0 * double(multiplier.size()), [&](std::size_t begin, std::size_t end) {
            if (gx)
                for (std::size_t i = begin; i < end; ++i) gx[i] += gy[i] * m[i];
            if (gr)
                for (std::size_t i = begin; i < end; ++i) gr[i] += gy[i];
        });
    }

    // Philox's ten rounds of two multiplies and four logic ops per four elements, and the select
    static constexpr double dropout_flops = 24;
};

inline void check_dropout_p(double p, const char* op) {
    if (!(p >= 0 && p <= 1))
        throw value_error(std::string(op) + ": probability p must be in [0, 1], got " + std::to_string(p));
}

}  // namespace detail

// dropout(x, p, training, gen): zeros each element with probability p (drawn from gen) and scales
// the rest by 1/(1-p). Returns x itself when !training or p == 0; p == 1 gives zeros.
// p outside [0, 1] is a value_error.
template <Real T, std::size_t N>
Var<T, N> dropout(const Var<T, N>& x, double p, bool training, Generator& gen) {
    require_var(x, "dropout", "x");
    detail::check_dropout_p(p, "dropout");
    if (!training || p == 0) return x;
    return make_op<detail::DropoutNode<T, N>>(x.shape(), [&](auto& node) { node.forward(p, gen); }, x, Var<T, N>{});
}

template <LazyExpression E>
auto dropout(const E& e, double p, bool training, Generator& gen) {
    return dropout(eval(e), p, training, gen);
}

// add_dropout(residual, x, p, training, gen) = residual + dropout(x, p, training, gen) in one node
// and one pass (the same mask as dropout draws from gen); residual and x have the same shape.
// Not training or p == 0: residual + x.
template <Real T, std::size_t N>
Var<T, N> add_dropout(const Var<T, N>& residual, const Var<T, N>& x, double p, bool training, Generator& gen) {
    require_var(residual, "add_dropout", "residual");
    require_var(x, "add_dropout", "x");
    detail::check_dropout_p(p, "add_dropout");
    if (residual.shape() != x.shape())
        throw shape_error("add_dropout: residual has shape " + shape_str(residual.shape()) + " but x has shape " +
                          shape_str(x.shape()) + "; they must be equal");
    if (!training || p == 0) return residual + x;
    return make_op<detail::DropoutNode<T, N>>(x.shape(), [&](auto& node) { node.forward(p, gen); }, x, residual);
}

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_DROPOUT_COMPILED(EXTERN, T, N)                                                              \
    EXTERN template Var<T, N> dropout<T, N>(const Var<T, N>&, double, bool, Generator&);                         \
    EXTERN template Var<T, N> add_dropout<T, N>(const Var<T, N>&, const Var<T, N>&, double, bool, Generator&);
#define XGRAD_DETAIL_DROPOUTS_COMPILED(EXTERN, T) XGRAD_COMPILED_RANKS_1_TO_4(XGRAD_DETAIL_DROPOUT_COMPILED, EXTERN, T)
XGRAD_COMPILED_IN(ops, XGRAD_DETAIL_DROPOUTS_COMPILED)
#undef XGRAD_DETAIL_DROPOUTS_COMPILED
#undef XGRAD_DETAIL_DROPOUT_COMPILED
}  // namespace xgrad
