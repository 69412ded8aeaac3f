// Inverted dropout (torch.nn.functional.dropout): while training, each element is zeroed with
// probability p and the kept ones are scaled by 1/(1-p), so the expected value is unchanged.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "xgrad/core/expr.hpp"
#include "xgrad/core/random.hpp"

namespace xgrad {

namespace detail {

// y = x ⊙ m with m[i] = 1/(1-p) (kept) or 0 (dropped), drawn once in forward.
template <Real T, std::size_t N>
class DropoutNode final : public TensorNode<T, N> {
public:
    Var<T, N> x;
    std::vector<T> multiplier;  // the scaled mask, reused by backward

    const char* op_name() const override { return "dropout"; }
    auto inputs() { return std::tie(x); }
    void release_inputs() override { x = {}; }
    void for_each_input(const Node::InputVisitor& f) const override { xgrad::visit_inputs(f, x); }

    void forward(double p, Generator& gen) {
        const std::size_t n = x.size();
        multiplier.resize(n);
        const T keep_scale = p < 1 ? static_cast<T>(1.0 / (1.0 - p)) : T(0);
        for (std::size_t i = 0; i < n; ++i)  // p == 1 draws nothing: everything is dropped
            multiplier[i] = p < 1 && gen.uniform() >= p ? keep_scale : T(0);
        const T* src = x.value().data();
        T* dst = this->value.data();
        for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] * multiplier[i];
    }

    void backward() override {
        if (!x.requires_grad()) return;
        // dX (shape of x) += dY (shape of x) ⊙ m (same mask as forward)
        const T* gy = this->grad_buffer().data();
        T* gx = x.node()->grad_buffer().data();
        for (std::size_t i = 0; i < multiplier.size(); ++i) gx[i] += gy[i] * multiplier[i];
    }
};

}  // namespace detail

// dropout(x, p, training, gen): zeros each element with probability p (drawn from gen) and scales
// the rest by 1/(1-p). Returns x itself when !training or p == 0; p == 1 gives zeros.
// p outside [0, 1] is a value_error.
template <Real T, std::size_t N>
Var<T, N> dropout(const Var<T, N>& x, double p, bool training, Generator& gen) {
    detail::require_var(x, "dropout", "x");
    if (!(p >= 0 && p <= 1))
        throw value_error("dropout: probability p must be in [0, 1], got " + std::to_string(p));
    if (!training || p == 0) return x;
    return make_op<detail::DropoutNode<T, N>>(x.shape(), [&](auto& node) { node.forward(p, gen); }, x);
}

template <LazyExpression E>
auto dropout(const E& e, double p, bool training, Generator& gen) {
    return dropout(eval(e), p, training, gen);
}

}  // namespace xgrad
