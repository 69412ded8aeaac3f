// Gradient checks for matmul and linear (2-D, batched, folded; with and without bias).
#include "checks/registry.hpp"
#include "xgrad/ops/linalg.hpp"

namespace xgrad::checks {
namespace {

using S2 = std::array<std::size_t, 2>;
using S3 = std::array<std::size_t, 3>;
using S4 = std::array<std::size_t, 4>;

const auto mm = [](auto& a, auto& b) { return matmul(a, b); };
const auto lin = [](auto& x, auto& w, auto& b) { return linear(x, w, b); };
const auto lin_nobias = [](auto& x, auto& w) { return linear(x, w); };

const Register registered_linalg{{
    {"matmul", "(3,4)x(4,2)", [] { return gradcheck(mm, randn<2>(S2{3, 4}, 1), randn<2>(S2{4, 2}, 2)); }},
    {"matmul", "(2,3,4)x(2,4,2)", [] { return gradcheck(mm, randn<3>(S3{2, 3, 4}, 3), randn<3>(S3{2, 4, 2}, 4)); }},
    {"matmul", "(2,2,2,3)x(2,2,3,2)",
     [] { return gradcheck(mm, randn<4>(S4{2, 2, 2, 3}, 5), randn<4>(S4{2, 2, 3, 2}, 6)); }},
    {"matmul", "(2,3,4)x(4,3) folded", [] { return gradcheck(mm, randn<3>(S3{2, 3, 4}, 7), randn<2>(S2{4, 3}, 8)); }},
    {"linear", "x(5,4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<2>(S2{5, 4}, 9), randn<2>(S2{3, 4}, 10), randn<1>({3}, 11)); }},
    {"linear", "x(2,3,4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<3>(S3{2, 3, 4}, 12), randn<2>(S2{3, 4}, 13), randn<1>({3}, 14)); }},
    {"linear", "x(4,3) W(2,3) no bias",
     [] { return gradcheck(lin_nobias, randn<2>(S2{4, 3}, 15), randn<2>(S2{2, 3}, 16)); }},
    {"linear", "x(4) W(3,4) b(3)",
     [] { return gradcheck(lin, randn<1>({4}, 17), randn<2>(S2{3, 4}, 18), randn<1>({3}, 19)); }},
}};

}  // namespace
}  // namespace xgrad::checks
