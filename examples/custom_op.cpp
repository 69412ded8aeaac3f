// Writing your own op and verifying it with gradcheck.
//
// An op is a node struct plus a short function:
//   - the node derives from xgrad::OpNode and states three things: its inputs (inputs() names
//     them), its value (forward()) and its backward (backward() reads its output gradient and
//     ACCUMULATES into its inputs' gradients); OpNode derives the rest from inputs();
//   - the function checks its arguments and calls xgrad::make_op, which records the node on the
//     tape (or not, when nothing needs a gradient), hands it the inputs, sizes its value and runs
//     forward.
// Here: softplus(x) = log(1 + e^x), whose derivative is sigmoid(x).
#include <cmath>
#include <iostream>

#include <xgrad/xgrad.hpp>

template <xgrad::Real T, std::size_t N>
class SoftplusNode final : public xgrad::OpNode<SoftplusNode<T, N>, T, N> {
public:
    xgrad::Var<T, N> x;
    const char* op_name() const override { return "softplus"; }
    // The input slots, in the order make_op receives the inputs.
    auto inputs() { return std::tie(x); }
    // make_op has sized this->value to the output's shape: write it in place.
    void forward() {
        const T* px = x.value().data();
        T* y = this->value.data();
        for (std::size_t i = 0; i < this->value.size(); ++i) y[i] = std::log1p(std::exp(px[i]));
    }
    void backward() override {
        if (!x.requires_grad()) return;
        auto& gx = x.node()->grad_buffer();
        const auto& gy = this->grad_buffer();
        // dX (shape of x) += dY ⊙ sigmoid(X)
        for (std::size_t i = 0; i < gx.size(); ++i)
            gx.data()[i] += gy.data()[i] / (1 + std::exp(-x.value().data()[i]));
    }
};

template <xgrad::Real T, std::size_t N>
xgrad::Var<T, N> softplus(const xgrad::Var<T, N>& x) {
    // make_op<Node>(output shape, forward, inputs...): the lambda may set node parameters first
    return xgrad::make_op<SoftplusNode<T, N>>(x.shape(), [](auto& node) { node.forward(); }, x);
}

int main() {
    auto r = xgrad::gradcheck([](auto& x) { return softplus(x); }, xgrad::randn<2>({3, 4}));
    std::cout << r.report() << '\n';
    // the same op inside a larger function of two inputs
    auto r2 = xgrad::gradcheck([](auto& x, auto& w) { return xgrad::sum(softplus(x) * w, 1); },
                               xgrad::randn<2>({3, 4}, 1), xgrad::randn<1>({4}, 2));
    std::cout << r2.report() << '\n';
    return r.passed && r2.passed ? 0 : 1;
}
