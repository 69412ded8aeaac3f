// Gradient checks for the losses: mse_loss and cross_entropy (every reduction, ignore_index,
// label smoothing, class axis 0, 1 or last), and linear_cross_entropy (dlogits kept, or dX and dW in chunks of rows).
#include <cstdint>

#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

using I64 = std::int64_t;
const auto mse = [](auto& x, auto& t) { return mse_loss(x, t); };
const auto mse_sum = [](auto& x, auto& t) { return mse_loss(x, t, LossReduction::sum); };

const RegisterGradchecks registered_loss{"loss", {
    {"mse_loss", "(3,4) mean, target Var", [] { return gradcheck(mse, randn<2>({3, 4}, 1), randn<2>({3, 4}, 2)); }},
    {"mse_loss", "(3,4) sum, target Var", [] { return gradcheck(mse_sum, randn<2>({3, 4}, 1), randn<2>({3, 4}, 2)); }},
    {"mse_loss", "(2,1,3) mean, target Var", [] { return gradcheck(mse, randn<3>({2, 1, 3}, 3), randn<3>({2, 1, 3}, 4)); }},
    {"mse_loss", "(2,1,3) sum, const target",
     [] {
         const auto t = randn<3>({2, 1, 3}, 3);
         return gradcheck([&](auto& x) { return mse_loss(x, t, LossReduction::sum); }, randn<3>({2, 1, 3}, 4));
     }},
    {"mse_loss", "(5) unreduced",
     [] {
         return gradcheck([](auto& x, auto& t) { return mse_loss(x, t, unreduced); }, randn<1>({5}, 5),
                          randn<1>({5}, 6));
     }},
    {"cross_entropy", "(5,3) mean",
     [] {
         const xt::xtensor<I64, 1> t{2, 0, 0, 1, 2};
         return gradcheck([&](auto& z) { return cross_entropy(z, t); }, randn<2>({5, 3}, 7));
     }},
    {"cross_entropy", "(5,3) sum, ignore_index, smoothing 0.3",
     [] {
         const xt::xtensor<I64, 1> t{2, -100, 0, 1, 2};
         const CrossEntropyOptions opt{.label_smoothing = 0.3, .reduction = LossReduction::sum};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, opt); }, randn<2>({5, 3}, 7));
     }},
    {"cross_entropy", "(5,4) ignore_index, smoothing 0.2",
     [] {
         const xt::xtensor<I64, 1> t{3, -100, 0, 1, -100};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, {.label_smoothing = 0.2}); }, randn<2>({5, 4}, 8));
     }},
    {"cross_entropy", "(2,4,3) sum, ignore_index 1",
     [] {
         const xt::xtensor<I64, 2> t{{0, 1, 3}, {2, 2, 1}};
         const CrossEntropyOptions opt{.ignore_index = 1, .reduction = LossReduction::sum};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, opt); }, randn<3>({2, 4, 3}, 9));
     }},
    {"cross_entropy", "(2,4,3) mean, ignore_index, smoothing 0.3",
     [] {
         const xt::xtensor<I64, 2> t{{0, 3, 1}, {-100, 2, 2}};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, {.label_smoothing = 0.3}); }, randn<3>({2, 4, 3}, 8));
     }},
    {"cross_entropy", "(2,3,4) classes last, ignore_index -1, smoothing 0.2",
     [] {
         const xt::xtensor<I64, 2> t{{0, 3, -1}, {2, 1, 1}};
         const CrossEntropyOptions opt{.ignore_index = -1, .label_smoothing = 0.2, .class_axis = -1};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, opt); }, randn<3>({2, 3, 4}, 11));
     }},
    {"cross_entropy", "(4,3) unreduced, smoothing 0.1",
     [] {
         const xt::xtensor<I64, 1> t{1, 2, 0, 1};
         return gradcheck([&](auto& z) { return cross_entropy(z, t, unreduced, {.label_smoothing = 0.1}); },
                          randn<2>({4, 3}, 10));
     }},
    {"cross_entropy", "(4) one sample, target 2",
     [] { return gradcheck([](auto& z) { return cross_entropy(z, xt::xtensor<I64, 0>(2)); }, randn<1>({4}, 10)); }},
    {"linear_cross_entropy", "x (2,3,4), W (5,4), chunks of 2 rows, ignore_index",
     [] {
         const xt::xtensor<I64, 2> t{{4, -100, 0}, {1, 2, 4}};
         return gradcheck([&](auto& x, auto& w) { return linear_cross_entropy(x, w, t, {.rows_per_chunk = 2}); },
                          randn<3>({2, 3, 4}, 11), randn<2>({5, 4}, 12));
     }},
    {"linear_cross_entropy", "x (5,3), W (6,3), sum, smoothing 0.2, dlogits kept",
     [] {
         const xt::xtensor<I64, 1> t{5, 0, 3, 3, 1};
         const LinearCrossEntropyOptions opt{.label_smoothing = 0.2, .reduction = LossReduction::sum};
         return gradcheck([&](auto& x, auto& w) { return linear_cross_entropy(x, w, t, opt); }, randn<2>({5, 3}, 13),
                          randn<2>({6, 3}, 14));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
