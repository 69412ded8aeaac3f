// Gradient checks of the reductions.
#include "checks/registry.hpp"

namespace xgrad::checks {
namespace {

const Register registered_reduce{{
    {"sum (all)", "(2,3,4)", [] { return gradcheck([](auto& a) { return sum(a); }, randn<3>({2, 3, 4})); }},
    {"sum (axis 1)", "(2,3,4)", [] { return gradcheck([](auto& a) { return sum(a, 1); }, randn<3>({2, 3, 4})); }},
    {"mean (all, keepdims)", "(3,5)", [] { return gradcheck([](auto& a) { return mean(a, keepdims); }, randn<2>({3, 5})); }},
    {"mean (axis -1)", "(2,3,4)", [] { return gradcheck([](auto& a) { return mean(a, -1); }, randn<3>({2, 3, 4})); }},
    {"max (all)", "(4,5)", [] { return gradcheck([](auto& a) { return max(a); }, randn<2>({4, 5})); }},
    {"max (axis 0, keepdims)", "(4,5)", [] { return gradcheck([](auto& a) { return max(a, 0, keepdims); }, randn<2>({4, 5})); }},
}};

}  // namespace
}  // namespace xgrad::checks
