// Gradient checks for matmul and linear (2-D, batched, folded; with and without bias; with relu or
// gelu in the same node; shared and expression operands).
#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

using S2 = std::array<std::size_t, 2>;
using S3 = std::array<std::size_t, 3>;
using S4 = std::array<std::size_t, 4>;

const auto mm = [](auto& a, auto& b) { return matmul(a, b); };
const auto lin = [](auto& x, auto& w, auto& b) { return linear(x, w, b); };
const auto lin_nobias = [](auto& x, auto& w) { return linear(x, w); };

const RegisterGradchecks registered_linalg{"linalg", {
    {"matmul", "(3,4)x(4,2)", [] { return gradcheck(mm, randn<2>(S2{3, 4}, 1), randn<2>(S2{4, 2}, 2)); }},
    {"matmul", "(1,5)x(5,3) one row", [] { return gradcheck(mm, randn<2>(S2{1, 5}, 3), randn<2>(S2{5, 3}, 4)); }},
    {"matmul", "(2,3,4)x(2,4,2)", [] { return gradcheck(mm, randn<3>(S3{2, 3, 4}, 3), randn<3>(S3{2, 4, 2}, 4)); }},
    {"matmul", "(2,2,2,3)x(2,2,3,2)",
     [] { return gradcheck(mm, randn<4>(S4{2, 2, 2, 3}, 5), randn<4>(S4{2, 2, 3, 2}, 6)); }},
    {"matmul", "(2,3,4)x(4,3) folded", [] { return gradcheck(mm, randn<3>(S3{2, 3, 4}, 7), randn<2>(S2{4, 3}, 8)); }},
    {"matmul", "(2,2,1,3)x(3,2) folded", [] { return gradcheck(mm, randn<4>(S4{2, 2, 1, 3}, 11), randn<2>(S2{3, 2}, 12)); }},
    {"matmul", "(3,3) a·a same operand", [] { return gradcheck([](auto& a) { return matmul(a, a); }, randn<2>(S2{3, 3}, 13)); }},
    {"matmul", "(2,2,3)x(2,3,2) tanh(a)·(2b)",
     [] {
         return gradcheck([](auto& a, auto& b) { return matmul(tanh(a), b * 2.0); }, randn<3>(S3{2, 2, 3}, 14),
                          randn<3>(S3{2, 3, 2}, 15));
     }},
    {"linear", "x(5,4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<2>(S2{5, 4}, 9), randn<2>(S2{3, 4}, 10), randn<1>({3}, 11)); }},
    {"linear", "x(2,3,4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<3>(S3{2, 3, 4}, 12), randn<2>(S2{3, 4}, 13), randn<1>({3}, 14)); }},
    {"linear", "x(4,3) W(2,3) no bias",
     [] { return gradcheck(lin_nobias, randn<2>(S2{4, 3}, 15), randn<2>(S2{2, 3}, 16)); }},
    {"linear", "x(2,3,4) W(3,4) no bias",
     [] { return gradcheck(lin_nobias, randn<3>(S3{2, 3, 4}, 25), randn<2>(S2{3, 4}, 21)); }},
    {"linear", "x(4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<1>({4}, 17), randn<2>(S2{3, 4}, 18), randn<1>({3}, 19)); }},
    {"linear", "x(4) W(3,4) no bias", [] { return gradcheck(lin_nobias, randn<1>({4}, 23), randn<2>(S2{3, 4}, 21)); }},
    {"linear_add", "r(2,3,5) + x(2,3,4) W(5,4) b(5) one node",
     [] {
         return gradcheck([](auto& r, auto& x, auto& w, auto& b) { return linear_add(r, x, w, b); },
                          randn<3>(S3{2, 3, 5}, 41), randn<3>(S3{2, 3, 4}, 42), randn<2>(S2{5, 4}, 43), randn<1>({5}, 44));
     }},
    {"linear_add", "r(4,3) + x(4,2) W(3,2) no bias",
     [] {
         return gradcheck([](auto& r, auto& x, auto& w) { return linear_add(r, x, w, Var<double, 1>{}); },
                          randn<2>(S2{4, 3}, 45), randn<2>(S2{4, 2}, 46), randn<2>(S2{3, 2}, 47));
     }},
    {"linear", "relu(x(2,3,4) W(5,4) b(5)) one node",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return linear(x, w, b, LinearActivation::relu); },
                          randn<3>(S3{2, 3, 4}, 30), randn<2>(S2{5, 4}, 31), randn<1>({5}, 32));
     }},
    {"linear", "gelu(x(5,4) W(3,4) b(3)) one node",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return linear(x, w, b, LinearActivation::gelu); },
                          randn<2>(S2{5, 4}, 33), randn<2>(S2{3, 4}, 34), randn<1>({3}, 35));
     }},
    {"linear", "gelu_tanh(x(2,2,4) W(3,4) b(3)) one node",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return linear(x, w, b, LinearActivation::gelu_tanh); },
                          randn<3>(S3{2, 2, 4}, 38), randn<2>(S2{3, 4}, 39), randn<1>({3}, 40));
     }},
    {"linear", "gelu(x(4) W(3,4)) no bias, one node",
     [] {
         return gradcheck([](auto& x, auto& w) { return linear(x, w, Var<double, 1>{}, LinearActivation::gelu); },
                          randn<1>({4}, 36), randn<2>(S2{3, 4}, 37));
     }},
    {"linear", "x(3,4) W1(3,4) W2(2,3) two layers, tanh",
     [] {
         return gradcheck([](auto& x, auto& w1, auto& w2) { return linear(tanh(linear(x, w1)), w2); },
                          randn<2>(S2{3, 4}, 26), randn<2>(S2{3, 4}, 21), randn<2>(S2{2, 3}, 27));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
