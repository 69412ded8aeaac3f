// The text of a shape, "(2, 3, 4)", that every error message of xgrad builds (core/error.hpp's
// shape_str), compiled once here instead of in every unit.
#include <string>

#include "xgrad/core/error.hpp"

namespace xgrad::detail {

namespace {
template <class D>
std::string dims_text(const D* dims, std::size_t rank) {
    std::string text = "(";
    for (std::size_t i = 0; i < rank; ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
    return text + (rank == 1 ? ",)" : ")");
}
}  // namespace

std::string shape_text(const std::size_t* dims, std::size_t rank) { return dims_text(dims, rank); }
std::string shape_text(const long* dims, std::size_t rank) { return dims_text(dims, rank); }

}  // namespace xgrad::detail
