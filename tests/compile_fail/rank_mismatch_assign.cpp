// expect: xgrad: rank mismatch: the expression's rank differs from the Var it is assigned to
#include "xgrad/xgrad.hpp"
int main() {
    auto a = xgrad::parameter(xt::xtensor<double, 3>(std::array<std::size_t, 3>{2, 3, 4}));
    xgrad::Var<double, 2> y = a * 2.0;  // rank 3 expression into a rank 2 Var
    (void)y;
}
