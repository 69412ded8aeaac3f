// xgrad error family: every failure a user can cause is one of these.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace xgrad {

// Base of every exception xgrad throws on bad input.
struct error : std::runtime_error {
    using std::runtime_error::runtime_error;
};
// Operand shapes do not fit the op (message names op, operand, shapes).
struct shape_error : error {
    using error::error;
};
// An argument value is invalid (axis out of range, p outside [0,1), ...).
struct value_error : error {
    using error::error;
};
// The tape is used in a way it does not support (backward of a non-scalar without a seed, ...).
struct tape_error : error {
    using error::error;
};
// Anomaly mode (DetectAnomaly) found NaN or inf in an op's output or gradient.
struct anomaly_error : error {
    using error::error;
};
// Reading or writing a file failed (message names the file).
struct io_error : error {
    using error::error;
};

namespace detail {
// "(2, 3, 4)" of the `rank` dims at `dims`; "(3,)" for one, "()" for none (compiled in libxgrad).
std::string shape_text(const std::size_t* dims, std::size_t rank);
std::string shape_text(const long* dims, std::size_t rank);

// The throws of checks that every op inlines, out of line (compiled in libxgrad) so that each
// inlined check is a compare and a call, not the building of its message.
[[noreturn]] void throw_empty_var(const char* op, const char* operand);
[[noreturn]] void throw_stale_var(const char* op_name, const std::size_t* dims, std::size_t rank);
[[noreturn]] void throw_not_broadcastable(const char* op, const std::size_t* a, std::size_t rank_a, const std::size_t* b,
                                          std::size_t rank_b);
}  // namespace detail

// "(2, 3, 4)" for any shape-like container; "()" for a scalar.
template <class S>
std::string shape_str(const S& shape) {
    if constexpr (requires { detail::shape_text(shape.data(), shape.size()); }) {
        return detail::shape_text(shape.data(), shape.size());  // arrays, vectors, spans of size_t or long
    } else {
        std::vector<long> dims;  // any other container's dims, as long
        for (auto d : shape) dims.push_back(static_cast<long>(d));
        return detail::shape_text(dims.data(), dims.size());
    }
}

// Entry check of an op or module (yours too): `v` (a Var handle, or anything testable as bool) must
// not be empty, as a default-constructed or moved-from Var is; `operand` names it in the value_error.
template <class V>
void require_var(const V& v, const char* op, const char* operand) {
    if (!v) detail::throw_empty_var(op, operand);
}

}  // namespace xgrad
