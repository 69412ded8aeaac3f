// expect: xgrad: an expression cannot mix float and double operands
#include "xgrad/xgrad.hpp"
int main() {
    auto a = xgrad::parameter(xt::xtensor<double, 2>(std::array<std::size_t, 2>{2, 3}));
    auto b = xgrad::parameter(xt::xtensor<float, 2>(std::array<std::size_t, 2>{2, 3}));
    auto y = xgrad::eval(a + b);
    (void)y;
}
