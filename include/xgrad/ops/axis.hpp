// Axis arguments shared by reductions, softmax and shape ops.
#pragma once
#include <cstddef>
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad {

// Tag: keep the reduced axis with extent 1 (PyTorch keepdim=True).
struct keepdims_t {};
inline constexpr keepdims_t keepdims{};

namespace detail {

// Resolves a possibly negative axis against the rank of `shape`; the error names the op and the
// operand with its shape ("sum: axis 3 is out of range for x of shape (2, 3)").
template <class S>
std::size_t resolve_axis(long axis, const S& shape, const char* op, const char* operand = "x") {
    const long r = static_cast<long>(shape.size());
    if (axis < -r || axis >= r)
        throw value_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " + operand +
                          " of shape " + shape_str(shape));
    return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

// A contiguous row-major tensor seen as (outer, extent, inner) around one axis.
struct AxisSplit {
    std::size_t outer = 1, extent = 1, inner = 1;
};
template <class S>
AxisSplit split_at(const S& shape, std::size_t axis) {
    AxisSplit s;
    for (std::size_t k = 0; k < shape.size(); ++k) {
        if (k < axis) s.outer *= shape[k];
        else if (k == axis) s.extent = shape[k];
        else s.inner *= shape[k];
    }
    return s;
}

}  // namespace detail
}  // namespace xgrad
