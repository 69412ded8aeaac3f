// Gradient checks of the elementwise ops and fused expressions.
#include "checks/registry.hpp"

namespace xgrad::checks {
namespace {

const Register registered_elementwise{{
    {"add (broadcast bias)", "(3,4)+(4,)", [] { return gradcheck([](auto& a, auto& b) { return a + b; }, randn<2>({3, 4}), randn<1>({4}, 2)); }},
    {"sub (size-1 dims)", "(3,1)-(1,4)", [] { return gradcheck([](auto& a, auto& b) { return a - b; }, randn<2>({3, 1}), randn<2>({1, 4}, 2)); }},
    {"mul (scalar operand)", "(2,3,4)*()", [] { return gradcheck([](auto& a, auto& s) { return a * s; }, randn<3>({2, 3, 4}), randn<0>({}, 2)); }},
    {"div", "(3,4)/(3,4)", [] { return gradcheck([](auto& a, auto& b) { return a / b; }, randn<2>({3, 4}), uniform<2>({3, 4}, 0.5, 2, 2)); }},
    {"neg, scalar ops", "(5,)", [] { return gradcheck([](auto& a) { return 2.0 - a * 3.0 + 1.0 / (a * a + 1.0); }, randn<1>({5})); }},
    {"exp", "(3,4)", [] { return gradcheck([](auto& a) { return exp(a); }, randn<2>({3, 4})); }},
    {"log", "(3,4)", [] { return gradcheck([](auto& a) { return log(a); }, uniform<2>({3, 4}, 0.5, 3)); }},
    {"sqrt", "(2,3,2)", [] { return gradcheck([](auto& a) { return sqrt(a); }, uniform<3>({2, 3, 2}, 0.5, 3)); }},
    {"pow", "(6,)", [] { return gradcheck([](auto& a) { return pow(a, 1.7); }, uniform<1>({6}, 0.5, 2)); }},
    {"tanh", "(3,4)", [] { return gradcheck([](auto& a) { return tanh(a); }, randn<2>({3, 4})); }},
    {"sigmoid", "(3,4)", [] { return gradcheck([](auto& a) { return sigmoid(a); }, randn<2>({3, 4}, 3)); }},
    {"relu", "(3,4)", [] { return gradcheck([](auto& a) { return relu(a) + a * 0.1; }, randn<2>({3, 4}, 4)); }},
    {"gelu (erf)", "(3,4)", [] { return gradcheck([](auto& a) { return gelu(a); }, randn<2>({3, 4}, 5)); }},
    {"gelu (tanh)", "(3,4)", [] { return gradcheck([](auto& a) { return gelu_tanh(a); }, randn<2>({3, 4}, 6)); }},
    {"abs", "(3,4)", [] { return gradcheck([](auto& a) { return abs(a); }, randn<2>({3, 4}, 7)); }},
    {"square", "(3,4)", [] { return gradcheck([](auto& a) { return square(a); }, randn<2>({3, 4}, 8)); }},
    {"fused tanh(a*b+c)*d", "(3,4),(3,4),(4,),(3,4)",
     [] {
         return gradcheck([](auto& a, auto& b, auto& c, auto& d) { return tanh(a * b + c) * d; }, randn<2>({3, 4}, 1),
                          randn<2>({3, 4}, 2), randn<1>({4}, 3), randn<2>({3, 4}, 4));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
