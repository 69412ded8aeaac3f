// expect: xgrad: matmul needs operands of equal rank
#include "xgrad/xgrad.hpp"
int main() {
    auto a = xgrad::parameter(xt::xtensor<double, 2>(std::array<std::size_t, 2>{3, 4}));
    auto b = xgrad::parameter(xt::xtensor<double, 3>(std::array<std::size_t, 3>{2, 4, 5}));
    auto y = xgrad::matmul(a, b);  // a rank-2 left operand with a rank-3 right one
    (void)y;
}
