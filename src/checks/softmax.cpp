// Gradient checks for softmax, log_softmax and masked_softmax (every mask kind).
#include <limits>

#include "checks/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

constexpr double neg_inf = -std::numeric_limits<double>::infinity();
using B2 = xt::xtensor<bool, 2>;

const Register softmax_checks{{
    {"softmax", "(3,4) axis 0",
     [] { return gradcheck([](auto& x) { return softmax(x, 0); }, randn<2>({3, 4}, 401)); }},
    {"softmax", "(2,3,4) axis -1",
     [] { return gradcheck([](auto& x) { return softmax(x, -1); }, randn<3>({2, 3, 4}, 402)); }},
    {"log_softmax", "(2,3,4) axis 1",
     [] { return gradcheck([](auto& x) { return log_softmax(x, 1); }, randn<3>({2, 3, 4}, 403)); }},
    {"log_softmax", "(5,3) axis -1",
     [] { return gradcheck([](auto& x) { return log_softmax(x, -1); }, randn<2>({5, 3}, 404)); }},
    {"masked_softmax", "(2,3,4) ignore_mask (2,1,4)",
     [] {
         const xt::xtensor<bool, 3> pad{{{false, false, true, true}}, {{false, true, false, false}}};
         return gradcheck([&](auto& x) { return masked_softmax(x, ignore_mask(pad)); }, randn<3>({2, 3, 4}, 405));
     }},
    {"masked_softmax", "(2,2,3,4) keep_mask (3,4)",
     [] {
         const B2 keep{{true, false, true, true}, {false, true, true, false}, {true, true, true, true}};
         return gradcheck([&](auto& x) { return masked_softmax(x, keep_mask(keep)); }, randn<4>({2, 2, 3, 4}, 406));
     }},
    {"masked_softmax", "(2,3,4) additive_mask (4)",
     [] {
         const xt::xtensor<double, 1> bias{0.5, neg_inf, -1.0, 2.0};
         return gradcheck([&](auto& x) { return masked_softmax(x, additive_mask(bias)); }, randn<3>({2, 3, 4}, 407));
     }},
    {"masked_softmax", "(2,4,3) causal",
     [] { return gradcheck([](auto& x) { return masked_softmax(x, causal); }, randn<3>({2, 4, 3}, 408)); }},
    {"masked_softmax", "(2,3,5) valid_lens (2,3) with 0",
     [] {
         const xt::xtensor<int, 2> lens{{5, 2, 0}, {1, 3, 4}};
         return gradcheck([&](auto& x) { return masked_softmax(x, valid_lens(lens)); }, randn<3>({2, 3, 5}, 409));
     }},
    {"masked_softmax", "(2,3,4) valid_lens (2) + causal",
     [] {
         const xt::xtensor<int, 1> lens{2, 4};
         return gradcheck([&](auto& x) { return masked_softmax(x, valid_lens(lens), causal); },
                          randn<3>({2, 3, 4}, 410));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
