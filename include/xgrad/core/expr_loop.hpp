// The loop that evaluates an elementwise expression (core/expr.hpp), written for xgrad rather than
// left to xtensor's assignment: every operand gets its strides in the output's index space (0 along
// the axes it is broadcast on), adjacent axes are merged wherever every operand runs contiguously
// across them, and the innermost axis is one plain loop, contiguous for every operand in the
// common case. The planning below does not depend on the expression, so a program compiles it once;
// each expression adds only its scalar formula inside three small loops.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

inline constexpr std::size_t max_loop_rank = 16;

// An operand's shape, right-aligned against the loop's (numpy broadcasting).
struct OperandShape {
    const std::size_t* extent;
    std::size_t rank;
};

// The loop's index space after merging: `rank` axes (at least 1) of `extent`; operand k steps
// `stride[k][a]` elements along axis a. `size` is the number of elements (0: nothing to do).
template <std::size_t K>
struct LoopPlan {
    std::size_t rank = 1, size = 1;
    std::array<std::size_t, max_loop_rank> extent{};
    std::array<std::array<std::size_t, max_loop_rank>, K> stride{};
};

// The plan of a loop over `shape` reading K operands of the given shapes (each broadcast to it).
template <std::size_t K>
LoopPlan<K> plan_loop(const std::size_t* shape, std::size_t rank, const std::array<OperandShape, K>& operands) {
    if (rank > max_loop_rank)
        throw value_error("elementwise: rank " + std::to_string(rank) + " is above the supported " +
                          std::to_string(max_loop_rank));
    LoopPlan<K> plan;
    plan.rank = 0;
    // contiguous[k]: operand k's row-major step along the axis being visited, from the last axis back
    std::array<std::size_t, K> contiguous;
    contiguous.fill(1);
    std::array<std::array<std::size_t, max_loop_rank>, K> stride_of_axis{};
    for (std::size_t a = rank; a-- > 0;) {
        plan.size *= shape[a];
        for (std::size_t k = 0; k < K; ++k) {
            const OperandShape& op = operands[k];
            const std::size_t lead = rank - op.rank;  // operand axis j = a - lead
            const std::size_t extent = a >= lead ? op.extent[a - lead] : 1;
            stride_of_axis[k][a] = extent == 1 ? 0 : contiguous[k];
            contiguous[k] *= extent;
        }
    }
    if (plan.size == 0) return plan;
    // keep the axes of extent above 1, merging an axis into the one before it when every operand
    // steps across the pair as across one axis
    for (std::size_t a = 0; a < rank; ++a) {
        if (shape[a] == 1) continue;
        bool merge = plan.rank > 0;
        for (std::size_t k = 0; merge && k < K; ++k)
            merge = plan.stride[k][plan.rank - 1] == stride_of_axis[k][a] * shape[a];
        if (!merge) ++plan.rank;
        const std::size_t last = plan.rank - 1;
        plan.extent[last] = merge ? plan.extent[last] * shape[a] : shape[a];
        for (std::size_t k = 0; k < K; ++k) plan.stride[k][last] = stride_of_axis[k][a];
    }
    if (plan.rank == 0) plan.rank = 1, plan.extent[0] = 1;  // one element: every stride 0
    return plan;
}

// Calls row(offset) for every row of the plan's innermost axis, offset[k] being operand k's first
// element of that row, in row-major order.
template <std::size_t K, class Row>
void for_each_row(const LoopPlan<K>& plan, Row&& row) {
    std::array<std::size_t, max_loop_rank> index{};
    std::array<std::size_t, K> offset{};
    const std::size_t outer = plan.rank - 1, rows = plan.size / plan.extent[outer];
    for (std::size_t r = 0; r < rows; ++r) {
        row(offset);
        for (std::size_t a = outer; a-- > 0;) {  // the odometer over the outer axes
            for (std::size_t k = 0; k < K; ++k) offset[k] += plan.stride[k][a];
            if (++index[a] < plan.extent[a]) break;
            for (std::size_t k = 0; k < K; ++k) offset[k] -= plan.stride[k][a] * plan.extent[a];
            index[a] = 0;
        }
    }
}

}  // namespace xgrad::detail
