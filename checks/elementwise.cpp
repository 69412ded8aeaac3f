// Gradient checks of the elementwise ops, scalar operands, broadcasting and fused expressions.
#include <limits>

#include <xtensor/xoperation.hpp>

#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

const RegisterGradchecks registered_elementwise{"elementwise", {
    {"add", "(3,4)+(4,) broadcast bias", [] { return gradcheck([](auto& a, auto& b) { return a + b; }, randn<2>({3, 4}), randn<1>({4}, 2)); }},
    {"sub", "(3,1)-(1,4) size-1 dims", [] { return gradcheck([](auto& a, auto& b) { return a - b; }, randn<2>({3, 1}), randn<2>({1, 4}, 2)); }},
    {"mul", "(2,3,4)*() scalar operand", [] { return gradcheck([](auto& a, auto& s) { return a * s; }, randn<3>({2, 3, 4}), randn<0>({}, 2)); }},
    {"mul", "(5,) x*x*x+x one leaf thrice", [] { return gradcheck([](auto& v) { return v * v * v + v; }, randn<1>({5})); }},
    {"div", "(3,4)/(3,4)", [] { return gradcheck([](auto& a, auto& b) { return a / b; }, randn<2>({3, 4}), uniform<2>({3, 4}, 0.5, 2, 2)); }},
    {"div", "(3,4)/(3,1) x/(c*c+1)-c", [] { return gradcheck([](auto& x, auto& c) { return x / (c * c + 1.0) - c; }, randn<2>({3, 4}, 1), randn<2>({3, 1}, 3)); }},
    {"mul+tanh", "(3,1),(1,4) c*r+tanh(c-r)", [] { return gradcheck([](auto& c, auto& r) { return c * r + tanh(c - r); }, randn<2>({3, 1}, 3), randn<2>({1, 4}, 4)); }},
    {"add+mul", "(3,4),(4,) x*b+b bias used twice", [] { return gradcheck([](auto& x, auto& b) { return x * b + b; }, randn<2>({3, 4}, 1), randn<1>({4}, 2)); }},
    {"neg", "(3,4)", [] { return gradcheck([](auto& a) { return -a; }, uniform<2>({3, 4}, -2, 2, 7)); }},
    {"scalar ops", "(5,) 2-a*3+1/(a*a+1)", [] { return gradcheck([](auto& a) { return 2.0 - a * 3.0 + 1.0 / (a * a + 1.0); }, randn<1>({5})); }},
    {"scalar ops", "(3,4) 2/(x+3)-1.5x", [] { return gradcheck([](auto& x) { return 2.0 / (x + 3.0) - 1.5 * x; }, uniform<2>({3, 4}, -1, 1, 7)); }},
    {"scalar ops", "(3,4) 1-x/4", [] { return gradcheck([](auto& x) { return 1.0 - x / 4.0; }, uniform<2>({3, 4}, -1, 1, 7)); }},
    {"exp", "(3,4)", [] { return gradcheck([](auto& a) { return exp(a); }, randn<2>({3, 4})); }},
    {"log", "(3,4)", [] { return gradcheck([](auto& a) { return log(a); }, uniform<2>({3, 4}, 0.5, 3)); }},
    {"sqrt", "(2,3,2)", [] { return gradcheck([](auto& a) { return sqrt(a); }, uniform<3>({2, 3, 2}, 0.5, 3)); }},
    {"rsqrt", "(2,3,2)", [] { return gradcheck([](auto& a) { return rsqrt(a); }, uniform<3>({2, 3, 2}, 0.5, 3, 4)); }},
    {"pow", "(6,) p=1.7", [] { return gradcheck([](auto& a) { return pow(a, 1.7); }, uniform<1>({6}, 0.5, 2)); }},
    {"pow", "(3,4) p=-1", [] { return gradcheck([](auto& a) { return pow(a, -1.0); }, uniform<2>({3, 4}, 0.5, 2, 7)); }},
    {"tanh", "(3,4)", [] { return gradcheck([](auto& a) { return tanh(a); }, randn<2>({3, 4})); }},
    {"sigmoid", "(3,4)", [] { return gradcheck([](auto& a) { return sigmoid(a); }, randn<2>({3, 4}, 3)); }},
    {"silu", "(3,4)", [] { return gradcheck([](auto& a) { return silu(a); }, randn<2>({3, 4}, 9)); }},
    {"silu", "(3,4) large |x|", [] { return gradcheck([](auto& a) { return silu(a); }, uniform<2>({3, 4}, -30, 30, 10)); }},
    {"relu", "(3,4) both sides, +0.1x", [] { return gradcheck([](auto& a) { return relu(a) + a * 0.1; }, randn<2>({3, 4}, 4)); }},
    {"relu", "(3,4) negative side, +x", [] { return gradcheck([](auto& a) { return relu(a) + a; }, uniform<2>({3, 4}, -2, -0.1, 7)); }},
    {"gelu", "(3,4) erf", [] { return gradcheck([](auto& a) { return gelu(a); }, randn<2>({3, 4}, 5)); }},
    {"gelu_tanh", "(3,4)", [] { return gradcheck([](auto& a) { return gelu_tanh(a); }, randn<2>({3, 4}, 6)); }},
    {"abs", "(3,4) both sides", [] { return gradcheck([](auto& a) { return abs(a); }, randn<2>({3, 4}, 7)); }},
    {"abs", "(3,4) negative side", [] { return gradcheck([](auto& a) { return abs(a); }, uniform<2>({3, 4}, -2, -0.1, 7)); }},
    {"square", "(3,4)", [] { return gradcheck([](auto& a) { return square(a); }, randn<2>({3, 4}, 8)); }},
    {"where", "(3,4) cond (3,4), a (3,4), b (4,) broadcast",
     [] {
         const xt::xtensor<bool, 2> cond = {{1, 0, 1, 0}, {0, 0, 1, 1}, {1, 1, 0, 0}};
         return gradcheck([&](auto& a, auto& b) { return where(cond, a, b) * a; }, randn<2>({3, 4}, 1), randn<1>({4}, 2));
     }},
    {"where", "(2,3) cond (3,), scalar b", [] {
         const xt::xtensor<bool, 1> cond = {1, 0, 1};
         return gradcheck([&](auto& a) { return where(cond, tanh(a), 0.5); }, randn<2>({2, 3}, 3));
     }},
    {"masked_fill", "(2,3,4) mask (3,4) -1e4 then softmax", [] {
         const xt::xtensor<bool, 2> pad = {{0, 0, 0, 1}, {0, 1, 1, 1}, {1, 1, 1, 1}};  // row 2: all masked
         return gradcheck([&](auto& s) { return softmax(masked_fill(s, pad, -10000.0), -1); }, randn<3>({2, 3, 4}, 4));
     }},
    {"masked_fill", "(2,3,3) causal -inf then softmax", [] {
         const xt::xtensor<int, 2> tril = {{1, 0, 0}, {1, 1, 0}, {1, 1, 1}};
         return gradcheck([&](auto& s) { return softmax(masked_fill(s, xt::equal(tril, 0), -std::numeric_limits<double>::infinity()), -1); },
                          randn<3>({2, 3, 3}, 5));
     }},
    {"fused expression", "(3,4),(3,4),(4,),(3,4) tanh(a*b+c)*d",
     [] {
         return gradcheck([](auto& a, auto& b, auto& c, auto& d) { return tanh(a * b + c) * d; }, randn<2>({3, 4}, 1),
                          randn<2>({3, 4}, 2), randn<1>({4}, 3), randn<2>({3, 4}, 4));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
