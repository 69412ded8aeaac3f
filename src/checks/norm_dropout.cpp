// Gradient checks for layer_norm and dropout (the dropout mask is fixed by re-seeding per call).
#include "checks/registry.hpp"
#include "xgrad/ops/dropout.hpp"
#include "xgrad/ops/norm.hpp"

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

const Register registered_norm_dropout{{
    {"layer_norm", "(4,5) affine (5) (5)",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return layer_norm(x, w, b); }, randn<2>({4, 5}, 1),
                          randn<1>({5}, 2), randn<1>({5}, 3));
     }},
    {"layer_norm", "(2,3,4) affine (4) (4)",
     [] {
         return gradcheck([](auto& x, auto& w, auto& b) { return layer_norm(x, w, b); }, randn<3>({2, 3, 4}, 4),
                          randn<1>({4}, 5), randn<1>({4}, 6));
     }},
    {"layer_norm", "(3,6) no affine, eps 1e-3",
     [] { return gradcheck([](auto& x) { return layer_norm(x, 1e-3); }, randn<2>({3, 6}, 7)); }},
    {"dropout", "(3,5) p=0.3", [] { return check_dropout(randn<2>({3, 5}, 8), 0.3); }},
    {"dropout", "(2,2,4) p=0.6", [] { return check_dropout(randn<3>({2, 2, 4}, 9), 0.6); }},
}};

}  // namespace
}  // namespace xgrad::checks
