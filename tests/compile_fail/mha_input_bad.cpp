// expect: xgrad: a module takes a Var<T, N> of the module's dtype T, or an elementwise expression of T
// errors: 1
#include "xgrad/xgrad.hpp"
int main() {
    xgrad::Generator gen;
    xgrad::nn::MultiheadAttention<double> mha({.embed_dim = 4, .num_heads = 2}, gen);
    auto x = xgrad::constant(xt::xtensor<double, 3>(std::array<std::size_t, 3>{3, 2, 4}));
    const xt::xtensor<double, 3> raw = x.value();  // an xtensor, not a Var: a mistake
    auto out = mha.forward(x + x, raw, x).output;
    (void)out;
}
