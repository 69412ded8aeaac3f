// expect: xgrad: slice and narrow support rank <= 16
#include "xgrad/xgrad.hpp"
int main() {
    std::array<std::size_t, 17> shape;
    shape.fill(1);
    auto a = xgrad::parameter(xt::xtensor<double, 17>(shape));
    auto y = xgrad::slice(a, 0, 0, 1);  // index maps hold at most 16 axes
    (void)y;
}
