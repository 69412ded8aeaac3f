// Gradient checks for softmax, log_softmax and masked_softmax (every mask kind, broadcasting masks).
#include <limits>

#include <xtensor/xstrided_view.hpp>

#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

constexpr double neg_inf = -std::numeric_limits<double>::infinity();
using B2 = xt::xtensor<bool, 2>;

// an (L, S) = (3, 4) keep mask
const B2 allowed{{true, true, false, true}, {false, true, true, true}, {true, false, false, false}};

const RegisterGradchecks registered_softmax{"softmax", {
    {"softmax", "(3,4) axis 0",
     [] { return gradcheck([](auto& x) { return softmax(x, 0); }, randn<2>({3, 4}, 401)); }},
    {"softmax", "(3,4) axis -1",
     [] { return gradcheck([](auto& x) { return softmax(x, -1); }, randn<2>({3, 4}, 1)); }},
    {"softmax", "(2,3,4) axis -1",
     [] { return gradcheck([](auto& x) { return softmax(x, -1); }, randn<3>({2, 3, 4}, 402)); }},
    {"softmax", "(2,3,4) axis 1",
     [] { return gradcheck([](auto& x) { return softmax(x, 1); }, randn<3>({2, 3, 4}, 2)); }},
    {"softmax", "(2,3,4) axis -3",
     [] { return gradcheck([](auto& x) { return softmax(x, -3); }, randn<3>({2, 3, 4}, 2)); }},
    {"softmax", "(2,3,4) axis 1, weighted sum",
     [] {
         const auto w = randn<3>({2, 3, 4}, 3);
         return gradcheck([&](auto& x) { return sum(softmax(x, 1) * constant(w)); }, randn<3>({2, 3, 4}, 2));
     }},
    {"log_softmax", "(3,4) axis 0",
     [] { return gradcheck([](auto& x) { return log_softmax(x, 0); }, randn<2>({3, 4}, 1)); }},
    {"log_softmax", "(5,3) axis -1",
     [] { return gradcheck([](auto& x) { return log_softmax(x, -1); }, randn<2>({5, 3}, 404)); }},
    {"log_softmax", "(2,3,4) axis 1",
     [] { return gradcheck([](auto& x) { return log_softmax(x, 1); }, randn<3>({2, 3, 4}, 403)); }},
    {"log_softmax", "(2,3,4) axis 2",
     [] { return gradcheck([](auto& x) { return log_softmax(x, 2); }, randn<3>({2, 3, 4}, 2)); }},
    {"log_softmax", "(2,3,4) axis -3",
     [] { return gradcheck([](auto& x) { return log_softmax(x, -3); }, randn<3>({2, 3, 4}, 2)); }},
    {"log_softmax", "(2,3,4) axis -1, weighted sum",
     [] {
         const auto w = randn<3>({2, 3, 4}, 3);
         return gradcheck([&](auto& x) { return sum(log_softmax(x, -1) * constant(w)); }, randn<3>({2, 3, 4}, 2));
     }},
    {"masked_softmax", "(2,3,4) ignore_mask (2,1,4)",
     [] {
         const xt::xtensor<bool, 3> pad{{{false, false, true, true}}, {{false, true, false, false}}};
         return gradcheck([&](auto& x) { return masked_softmax(x, ignore_mask(pad)); }, randn<3>({2, 3, 4}, 405));
     }},
    {"masked_softmax", "(2,2,3,4) ignore_mask (2,1,1,4)",
     [] {
         const B2 key_pad{{false, true, false, false}, {false, false, true, true}};  // (B, S)
         const xt::xtensor<bool, 4> pad4 = xt::reshape_view(key_pad, std::array<std::size_t, 4>{2, 1, 1, 4});
         return gradcheck([&](auto& x) { return masked_softmax(x, ignore_mask(pad4)); }, randn<4>({2, 2, 3, 4}, 5));
     }},
    {"masked_softmax", "(2,4) keep_mask (2,4) bool expression",
     [] {
         const B2 key_pad{{false, true, false, false}, {false, false, true, true}};
         return gradcheck([&](auto& x) { return masked_softmax(x, keep_mask(!key_pad)); }, randn<2>({2, 4}, 6));
     }},
    {"masked_softmax", "(2,3,4) keep_mask (3,4)",
     [] { return gradcheck([](auto& x) { return masked_softmax(x, keep_mask(allowed)); }, randn<3>({2, 3, 4}, 4)); }},
    {"masked_softmax", "(2,2,3,4) keep_mask (3,4)",
     [] {
         const B2 keep{{true, false, true, true}, {false, true, true, false}, {true, true, true, true}};
         return gradcheck([&](auto& x) { return masked_softmax(x, keep_mask(keep)); }, randn<4>({2, 2, 3, 4}, 406));
     }},
    {"masked_softmax", "(2,3,4) keep_mask (3,4), weighted sum",
     [] {
         const auto w = randn<3>({2, 3, 4}, 8);
         return gradcheck([&](auto& x) { return sum(masked_softmax(x, keep_mask(allowed)) * constant(w)); },
                          randn<3>({2, 3, 4}, 4));
     }},
    {"masked_softmax", "(2,3,4) additive_mask (4)",
     [] {
         const xt::xtensor<double, 1> bias{0.5, neg_inf, -1.0, 2.0};
         return gradcheck([&](auto& x) { return masked_softmax(x, additive_mask(bias)); }, randn<3>({2, 3, 4}, 407));
     }},
    {"masked_softmax", "(2,2,3,4) additive_mask (4)",
     [] {
         const xt::xtensor<double, 1> bias{0.5, neg_inf, -1.0, 2.0};
         return gradcheck([&](auto& x) { return masked_softmax(x, additive_mask(bias)); }, randn<4>({2, 2, 3, 4}, 5));
     }},
    {"masked_softmax", "(2,4,3) causal",
     [] { return gradcheck([](auto& x) { return masked_softmax(x, causal); }, randn<3>({2, 4, 3}, 408)); }},
    {"masked_softmax", "(2,3,4) causal",
     [] { return gradcheck([](auto& x) { return masked_softmax(x, causal); }, randn<3>({2, 3, 4}, 4)); }},
    {"masked_softmax", "(2,3,4) valid_lens (2)",
     [] {
         const xt::xtensor<int, 1> lens{1, 3};
         return gradcheck([&](auto& x) { return masked_softmax(x, valid_lens(lens)); }, randn<3>({2, 3, 4}, 4));
     }},
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
