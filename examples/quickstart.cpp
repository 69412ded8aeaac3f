// The smallest complete program (linked from the README): fit a tanh layer with hand-written SGD steps.
#include <iostream>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

int main() {
    auto W = parameter(xgrad::randn<2>({4, 3}));  // leaves that require grad
    auto b = parameter(xt::xtensor<double, 1>(xt::zeros<double>({4})));
    auto x = constant(xgrad::randn<2>({8, 3}, 2));  // an input: no gradient
    auto y = constant(xt::xtensor<double, 2>(0.5 * xt::tanh(xgrad::randn<2>({8, 4}, 3))));

    double first = 0, last = 0;
    for (int step = 0; step < 200; ++step) {
        auto loss = mean(square(tanh(linear(x, W, b)) - y));  // records nodes on the tape
        backward(loss);                                       // W.grad(), b.grad() hold dloss/dW, dloss/db
        W.value() -= 0.5 * W.grad();                          // a hand-written SGD step
        b.value() -= 0.5 * b.grad();
        W.zero_grad();
        b.zero_grad();
        tape().clear();  // end of step: nodes are kept for reuse
        (step == 0 ? first : last) = loss.value()();
    }
    std::cout << "loss " << first << " -> " << last << '\n';
    return last < first / 2 ? 0 : 1;
}
