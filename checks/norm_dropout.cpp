// Gradient checks for layer_norm, rms_norm and dropout (the dropout mask is fixed by re-seeding per call).
#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

GradcheckResult check_dropout(auto x, double p) {
    Generator gen;
    return gradcheck(
        [&](auto& v) {
            gen.manual_seed(99);
            return dropout(v, p, true, gen);
        },
        x);
}

const auto affine = [](auto& x, auto& w, auto& b) { return layer_norm(x, w, b); };

const RegisterGradchecks registered_norm_dropout{"norm_dropout", {
    {"layer_norm", "(4,5) affine (5) (5)",
     [] { return gradcheck(affine, randn<2>({4, 5}, 1), randn<1>({5}, 2), randn<1>({5}, 3)); }},
    {"layer_norm", "(2,3,4) affine (4) (4)",
     [] { return gradcheck(affine, randn<3>({2, 3, 4}, 4), randn<1>({4}, 5), randn<1>({4}, 6)); }},
    {"layer_norm", "(3,5) const weight and bias",
     [] {
         const auto w = constant(randn<1>({5}, 9)), b = constant(randn<1>({5}, 10));
         return gradcheck([&](auto& x) { return layer_norm(x, w, b); }, randn<2>({3, 5}, 11));
     }},
    {"layer_norm", "(3,6) no affine, eps 1e-3",
     [] { return gradcheck([](auto& x) { return layer_norm(x, 1e-3); }, randn<2>({3, 6}, 7)); }},
    {"layer_norm", "(7) no affine, eps 1e-3",
     [] { return gradcheck([](auto& x) { return layer_norm(x, 1e-3); }, randn<1>({7}, 8)); }},
    {"rms_norm", "(4,5) weight (5), eps 1e-6",
     [] {
         return gradcheck([](auto& x, auto& w) { return rms_norm(x, w, 1e-6); }, randn<2>({4, 5}, 21), randn<1>({5}, 22));
     }},
    {"rms_norm", "(2,3,4) weight (4), default eps",
     [] { return gradcheck([](auto& x, auto& w) { return rms_norm(x, w); }, randn<3>({2, 3, 4}, 23), randn<1>({4}, 24)); }},
    {"rms_norm", "(3,6) no weight, eps 1e-3",
     [] { return gradcheck([](auto& x) { return rms_norm(x, 1e-3); }, randn<2>({3, 6}, 25)); }},
    {"rms_norm", "(5) const weight, input shifted by 3",
     [] {
         const auto w = constant(randn<1>({5}, 26));
         return gradcheck([&](auto& x) { return rms_norm(x, w, 1e-5); }, uniform<1>({5}, 2, 4, 27));
     }},
    {"dropout", "(3,5) p=0.3", [] { return check_dropout(randn<2>({3, 5}, 8), 0.3); }},
    {"dropout", "(2,2,4) p=0.6", [] { return check_dropout(randn<3>({2, 2, 4}, 9), 0.6); }},
    {"add_dropout", "(3,5) + (3,5) p=0.3",
     [] {
         Generator gen;
         return gradcheck(
             [&](auto& r, auto& x) {
                 gen.manual_seed(7);
                 return add_dropout(r, x, 0.3, true, gen);
             },
             randn<2>({3, 5}, 12), randn<2>({3, 5}, 13));
     }},
    {"add_dropout", "(2,3,4) residual x + dropout(x*x), p=0.5",
     [] {
         Generator gen;
         return gradcheck(
             [&](auto& x) {
                 gen.manual_seed(8);
                 return add_dropout(x, Var<double, 3>(x * x), 0.5, true, gen);
             },
             randn<3>({2, 3, 4}, 14));
     }},
    {"dropout", "(10) sum(dropout(x)*x), p=0.3",
     [] {
         Generator gen;
         return gradcheck(
             [&](auto& x) {
                 gen.manual_seed(2024);
                 return sum(dropout(x, 0.3, true, gen) * x);
             },
             randn<1>({10}, 3));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
