// Gradient checks for the shape ops (reshape, permute, transpose, heads, concat, slice, narrow,
// expand, broadcast_to), and the hooks' ops (hook_point with a backward hook, patch_at).
#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

const RegisterGradchecks registered_shape{"shape", {
    {"reshape", "(2,3,4)->(4,-1)",
     [] { return gradcheck([](auto& x) { return reshape<2>(x, {4, -1}); }, randn<3>({2, 3, 4}, 301)); }},
    {"reshape", "(2,3)->(3,-1)", [] { return gradcheck([](auto& x) { return reshape<2>(x, {3, -1}); }, randn<2>({2, 3}, 1)); }},
    {"permute", "(2,3,4) order (2,0,1)",
     [] { return gradcheck([](auto& x) { return permute(x, {2, 0, 1}); }, randn<3>({2, 3, 4}, 302)); }},
    {"permute", "(2,1,3,2) order (3,1,0,2)",
     [] { return gradcheck([](auto& x) { return permute(x, {3, 1, 0, 2}); }, randn<4>({2, 1, 3, 2}, 3)); }},
    {"transpose", "(2,3,4) dims (0,-1)",
     [] { return gradcheck([](auto& x) { return transpose(x, 0, -1); }, randn<3>({2, 3, 4}, 303)); }},
    {"transpose", "(2,3) dims (0,1)", [] { return gradcheck([](auto& x) { return transpose(x, 0, 1); }, randn<2>({2, 3}, 1)); }},
    {"transpose", "(2,1,3,2) dims (1,2)",
     [] { return gradcheck([](auto& x) { return transpose(x, 1, 2); }, randn<4>({2, 1, 3, 2}, 3)); }},
    {"split_heads", "(2,3,6) H=3",
     [] { return gradcheck([](auto& x) { return split_heads(x, 3); }, randn<3>({2, 3, 6}, 304)); }},
    {"merge_heads", "(6,3,2) H=3",
     [] { return gradcheck([](auto& x) { return merge_heads(x, 3); }, randn<3>({6, 3, 2}, 305)); }},
    {"split_heads", "<4> (2,3,4) H=2",
     [] { return gradcheck([](auto& x) { return split_heads<4>(x, 2); }, randn<3>({2, 3, 4}, 306)); }},
    {"merge_heads", "(2,2,3,2) rank 4",
     [] { return gradcheck([](auto& x) { return merge_heads(x); }, randn<4>({2, 2, 3, 2}, 307)); }},
    {"concat", "(2,3)+(2,1)+(2,3) axis 1",
     [] {
         return gradcheck([](auto& a, auto& b) { return concat({a, b, a}, 1); }, randn<2>({2, 3}, 308),
                          randn<2>({2, 1}, 309));
     }},
    {"concat", "(1,2,3)+(2,2,3)+(1,2,3) axis 0",
     [] {
         return gradcheck([](auto& x, auto& y) { return concat({x, y, x}, 0); }, randn<3>({1, 2, 3}, 11),
                          randn<3>({2, 2, 3}, 12));
     }},
    {"slice", "(3,5) axis -1 [1:-1]",
     [] { return gradcheck([](auto& x) { return slice(x, -1, 1, -1); }, randn<2>({3, 5}, 310)); }},
    {"slice", "(2,2,3) axis -1 [-2:3]",
     [] { return gradcheck([](auto& x) { return slice(x, -1, -2, 3); }, randn<3>({2, 2, 3}, 12)); }},
    {"narrow", "(4,2,3) axis 0 start 1 len 2",
     [] { return gradcheck([](auto& x) { return narrow(x, 0, 1, 2); }, randn<3>({4, 2, 3}, 311)); }},
    {"narrow", "(1,2,3) axis 2 start -3 len 2",
     [] { return gradcheck([](auto& x) { return narrow(x, 2, -3, 2); }, randn<3>({1, 2, 3}, 11)); }},
    {"expand", "(3,1)->(2,3,4)",
     [] { return gradcheck([](auto& x) { return expand<3>(x, {2, 3, 4}); }, randn<2>({3, 1}, 312)); }},
    {"expand", "(1,2,3)->(2,2,3)",
     [] { return gradcheck([](auto& x) { return expand<3>(x, {2, 2, 3}); }, randn<3>({1, 2, 3}, 11)); }},
    {"broadcast_to", "(1,)->(5,)",
     [] { return gradcheck([](auto& x) { return broadcast_to<1>(x, {5}); }, randn<1>({1}, 13)); }},
    {"hook_point", "(2,3) with a backward hook reading dL/dv",
     [] {
         static const Hooks reading = [] {
             Hooks h;
             h.backward("point", [](const xt::xtensor<double, 2>&) {});
             return h;
         }();
         return gradcheck([](auto& x) { const UseHooks use(reading); return hook_point(x * x, "point"); },
                          randn<2>({2, 3}, 17));
     }},
    {"patch_at", "(2,3,4) index (-1,1,-1)",
     [] {
         const xt::xtensor<double, 3> source = randn<3>({2, 3, 4}, 19);
         return gradcheck([&](auto& x) { return patch_at(x, source, {-1, 1, -1}); }, randn<3>({2, 3, 4}, 18));
     }},
    {"reshape+transpose", "(2,6)->(3,4)^T * w",
     [] {
         return gradcheck([](auto& x, auto& w) { return transpose(reshape<2>(x, {3, 4}), 0, 1) * w; },
                          randn<2>({2, 6}, 313), randn<2>({4, 3}, 314));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
