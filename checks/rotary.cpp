// Gradient checks for rotary_embedding: both pairings, a first position past 0, and the rotation
// inside a product (queries · keys), where the angles of the two positions meet.
#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

const RegisterGradchecks registered_rotary{"rotary", {
    {"rotary_embedding", "(2,3,2,4) interleaved",
     [] {
         const auto tables = rotary_tables<double>(4, 3);
         return gradcheck([&](auto& x) { return rotary_embedding(x, tables); }, randn<4>({2, 3, 2, 4}, 61));
     }},
    {"rotary_embedding", "(1,2,3,6) halves, positions 5 and 6, theta 500",
     [] {
         const auto tables = rotary_tables<double>(6, 8, 500.0);
         return gradcheck([&](auto& x) { return rotary_embedding(x, tables, 5, RotaryStyle::halves); },
                          randn<4>({1, 2, 3, 6}, 62));
     }},
    {"rotary_embedding", "scores q·k of (1,4,1,4) rotated queries and keys",
     [] {
         const auto tables = rotary_tables<double>(4, 4, 100.0);
         return gradcheck(
             [&](auto& q, auto& k) {
                 return sum(rotary_embedding(q, tables) * rotary_embedding(k, tables, 0, RotaryStyle::halves));
             },
             randn<4>({1, 4, 1, 4}, 63), randn<4>({1, 4, 1, 4}, 64));
     }},
}};

}  // namespace
}  // namespace xgrad::checks
