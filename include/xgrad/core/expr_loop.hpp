// The strided walk behind every elementwise loop of xgrad: an elementwise expression's
// (core/expr.hpp) and the shape ops' gathers (ops/shape_view.hpp). Each operand has a stride along
// every axis of the walk (0 along an axis it is broadcast or repeated on); adjacent axes are merged
// wherever every operand steps across them as across one axis, and the innermost axis is one plain
// loop, contiguous for every operand in the common case. None of it depends on an expression or
// an op: libxgrad compiles the plans once, and each user adds only its inner loops.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "xgrad/core/compiled.hpp"
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

// Drops the plan's axes of extent 1 and merges an axis into the one before it wherever every operand
// steps across the pair as across one axis (fewer, longer rows).
template <std::size_t K>
void merge_axes(LoopPlan<K>& plan) {
    std::size_t kept = 0;
    for (std::size_t a = 0; a < plan.rank; ++a) {
        const std::size_t extent = plan.extent[a];
        if (extent == 1) continue;
        bool merge = kept > 0;
        for (std::size_t k = 0; merge && k < K; ++k) merge = plan.stride[k][kept - 1] == plan.stride[k][a] * extent;
        if (!merge) ++kept;
        plan.extent[kept - 1] = merge ? plan.extent[kept - 1] * extent : extent;
        for (std::size_t k = 0; k < K; ++k) plan.stride[k][kept - 1] = plan.stride[k][a];
    }
    plan.rank = kept;
    if (plan.rank == 0) plan.rank = 1, plan.extent[0] = 1;  // one element (or none): every stride 0
}

// The plan of a loop over `shape` reading K operands of the given shapes (each broadcast to it).
template <std::size_t K>
LoopPlan<K> plan_loop(const std::size_t* shape, std::size_t rank, const std::array<OperandShape, K>& operands) {
    if (rank > max_loop_rank)
        throw value_error("elementwise: rank " + std::to_string(rank) + " is above the supported " +
                          std::to_string(max_loop_rank));
    LoopPlan<K> plan;
    plan.rank = rank;
    for (std::size_t k = 0; k < K; ++k) {
        const OperandShape& op = operands[k];
        const std::size_t lead = rank - op.rank;  // the operand's axis j is the loop's axis j + lead
        std::size_t contiguous = 1;               // its row-major step along axis a, from the last back
        for (std::size_t a = rank; a-- > 0;) {
            const std::size_t extent = a >= lead ? op.extent[a - lead] : 1;
            plan.stride[k][a] = extent == 1 ? 0 : contiguous;
            contiguous *= extent;
        }
    }
    for (std::size_t a = 0; a < rank; ++a) plan.extent[a] = shape[a], plan.size *= shape[a];
    merge_axes(plan);
    return plan;
}

// Calls row(offset) for every row of the plan's innermost axis, offset[k] being operand k's first
// element of that row, in row-major order.
template <std::size_t K, class Row>
void for_each_row(const LoopPlan<K>& plan, Row&& row) {
    std::array<std::size_t, max_loop_rank> index{};
    std::array<std::size_t, K> offset{};
    if (plan.size == 0) return;
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

// Compiled once in libxgrad (xgrad/core/compiled.hpp): the plans of loops over 2 to 16 operands.
#define XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, K)                                                          \
    EXTERN template LoopPlan<K> plan_loop<K>(const std::size_t*, std::size_t, const std::array<OperandShape, K>&); \
    EXTERN template void merge_axes<K>(LoopPlan<K>&);
#define XGRAD_DETAIL_LOOP_PLANS_COMPILED(EXTERN, T)                                                   \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 2) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 3)             \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 4) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 5)             \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 6) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 7)             \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 8) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 9)             \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 10) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 11)           \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 12) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 13)           \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 14) XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 15)           \
    XGRAD_DETAIL_LOOP_PLAN_COMPILED(EXTERN, 16)
XGRAD_COMPILED_ONCE_IN(ops, XGRAD_DETAIL_LOOP_PLANS_COMPILED)
#undef XGRAD_DETAIL_LOOP_PLANS_COMPILED
#undef XGRAD_DETAIL_LOOP_PLAN_COMPILED

}  // namespace xgrad::detail
