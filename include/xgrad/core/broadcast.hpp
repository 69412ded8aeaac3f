// numpy broadcasting of shapes (the reverse, summing a gradient back to a broadcast operand, is
// core/expr_loop.hpp's loop with the operand as its destination).
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

// Right-aligned numpy broadcast of two shapes; `op` names the op in the error.
template <std::size_t R, class SA, class SB>
std::array<std::size_t, R> broadcast_shapes(const SA& a, const SB& b, const char* op) {
    std::array<std::size_t, R> out{};
    const std::size_t na = a.size(), nb = b.size();
    for (std::size_t k = 0; k < R; ++k) {
        const std::size_t da = k + na >= R ? a[k + na - R] : 1;
        const std::size_t db = k + nb >= R ? b[k + nb - R] : 1;
        if (da != db && da != 1 && db != 1) throw_not_broadcastable(op, a.data(), na, b.data(), nb);
        out[k] = da == 1 ? db : da;
    }
    return out;
}

}  // namespace xgrad::detail
