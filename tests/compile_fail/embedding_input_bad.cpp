// expect: xgrad: Embedding takes integer indices, an xt::xtensor<std::int64_t, M>
// errors: 1
#include "xgrad/xgrad.hpp"
int main() {
    xgrad::Generator gen;
    xgrad::nn::Embedding<double> emb(5, 4, gen);
    xgrad::Var<double, 3> h = emb(xt::xtensor<int, 2>(std::array<std::size_t, 2>{2, 3}));
    (void)h;
}
