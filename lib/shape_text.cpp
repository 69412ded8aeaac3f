// The text of a shape, "(2, 3, 4)", that every error message of xgrad builds (core/error.hpp's
// shape_str), and the throws of the checks every op inlines, compiled once here instead of in
// every unit.
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

void throw_empty_var(const char* op, const char* operand) {
    throw value_error(std::string(op) + ": " + operand + " is an empty Var (default-constructed or moved from)");
}
void throw_stale_var(const char* op_name, const std::size_t* dims, std::size_t rank) {
    throw tape_error(std::string("a Var computed by ") + op_name + " " + shape_text(dims, rank) +
                     " was recorded on a tape that has since been cleared; recompute it in this step, or "
                     "use detach() for its value as a constant");
}
void throw_not_broadcastable(const char* op, const std::size_t* a, std::size_t rank_a, const std::size_t* b,
                             std::size_t rank_b) {
    throw shape_error(std::string(op) + ": cannot broadcast operand of shape " + shape_text(a, rank_a) +
                      " with operand of shape " + shape_text(b, rank_b));
}

}  // namespace xgrad::detail
