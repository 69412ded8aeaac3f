// expect: xgrad: a module takes a Var<T, N> of the module's dtype T, or an elementwise expression of T
// errors: 1
#include "xgrad/xgrad.hpp"
int main() {
    xgrad::Generator gen;
    xgrad::nn::Linear<double> lin(3, 2, gen);
    auto x = xgrad::constant(xt::xtensor<float, 2>(std::array<std::size_t, 2>{4, 3}));
    xgrad::Var<double, 2> y = lin(x);
    (void)y;
}
