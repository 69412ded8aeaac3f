// Gradient checks of the reductions: every kind over all elements and over an axis, with and
// without keepdims.
#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

const RegisterGradchecks registered_reduce{"reduce", {
    {"sum", "(2,3,4) all", [] { return gradcheck([](auto& a) { return sum(a); }, randn<3>({2, 3, 4})); }},
    {"sum", "(2,3,4) axis 1", [] { return gradcheck([](auto& a) { return sum(a, 1); }, randn<3>({2, 3, 4})); }},
    {"sum", "(5,1) axis 1 keepdims", [] { return gradcheck([](auto& a) { return sum(a, 1, keepdims); }, randn<2>({5, 1}, 12)); }},
    {"mean", "(3,5) all keepdims", [] { return gradcheck([](auto& a) { return mean(a, keepdims); }, randn<2>({3, 5})); }},
    {"mean", "(5,1) all", [] { return gradcheck([](auto& a) { return mean(a); }, randn<2>({5, 1}, 12)); }},
    {"mean", "(2,3,4) axis -1", [] { return gradcheck([](auto& a) { return mean(a, -1); }, randn<3>({2, 3, 4})); }},
    {"mean", "(2,3,4) axis -1 keepdims", [] { return gradcheck([](auto& a) { return mean(a, -1, keepdims); }, randn<3>({2, 3, 4}, 11)); }},
    {"mean", "(5,1) axis 0", [] { return gradcheck([](auto& a) { return mean(a, 0); }, randn<2>({5, 1}, 12)); }},
    {"max", "(4,5) all", [] { return gradcheck([](auto& a) { return max(a); }, randn<2>({4, 5})); }},
    {"max", "(4,5) axis 0 keepdims", [] { return gradcheck([](auto& a) { return max(a, 0, keepdims); }, randn<2>({4, 5})); }},
    {"max", "(2,3,4) axis 0", [] { return gradcheck([](auto& a) { return max(a, 0); }, randn<3>({2, 3, 4}, 11)); }},
    {"max", "(2,3,4) axis 2 keepdims", [] { return gradcheck([](auto& a) { return max(a, 2, keepdims); }, randn<3>({2, 3, 4}, 11)); }},
}};

}  // namespace
}  // namespace xgrad::checks
