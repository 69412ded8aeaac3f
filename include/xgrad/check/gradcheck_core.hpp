// The checking logic of gradcheck (check/gradcheck.hpp), on a function whose types are erased
// behind GradcheckTarget: compiled once, in libxgrad (lib/gradcheck.cpp), not once per checked
// function. (Templated on the function, it was two thirds of the machine code of a file of checks,
// and of its compile time.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace xgrad {

struct GradcheckOptions {
    double eps = 1e-6;   // finite-difference step
    double atol = 1e-5;  // pass when |analytic - numeric| <= atol + rtol * |numeric| (PyTorch's test)
    double rtol = 1e-3;
    enum class Mode { automatic, full, fast } mode = Mode::automatic;
    std::size_t full_limit = 20000;  // automatic: full when inputs x outputs elements <= this
    int projections = 4;             // fast mode: random (v, u) pairs per input
    std::uint64_t seed = 20240611;
    bool check_accumulation = true;
    bool allow_zero_grad = false;  // set for functions whose true gradient is zero at this point
};

struct GradcheckResult {
    bool passed = true;
    std::string mode;  // "full" or "fast"
    double max_abs_error = 0, max_rel_error = 0;
    // The element with the largest error (NaN counts as infinite): which input, where (index, or
    // projection number in fast mode), its values.
    std::size_t worst_input = 0;
    std::string worst_where;
    double analytic = 0, numeric = 0;
    std::string failure;  // why it failed (a mismatch: the element furthest past its tolerance); empty when passed

    std::string report() const;  // one line: passed or FAILED, the largest errors, the worst element, why
};

namespace detail {

// The function under test and its inputs x_0 .. x_{K-1} (double arrays), as the checker sees them.
// record() makes a parameter of every x_i and y = f(parameters) on the current tape; the gradient
// calls refer to those parameters and that y until the next record().
class GradcheckTarget {
public:
    virtual ~GradcheckTarget() = default;
    virtual std::size_t inputs() const = 0;
    virtual std::span<double> input(std::size_t i) = 0;  // x_i's elements, row-major, editable
    virtual std::vector<std::size_t> input_shape(std::size_t i) const = 0;
    virtual std::vector<double> forward_values() = 0;  // f(x) under NoGrad, flattened
    virtual void record() = 0;
    virtual void record_again() = 0;  // y = f(the same parameters)
    virtual bool output_requires_grad() const = 0;
    virtual std::span<const double> output() const = 0;  // y's values
    virtual void backward(std::span<const double> seed) = 0;  // backward(y, seed), seed shaped as y
    virtual void zero_grads() = 0;
    virtual std::span<const double> grad(std::size_t i) const = 0;  // parameter i's accumulated gradient
    void append_grads(std::vector<double>& out) const {
        for (std::size_t i = 0; i < inputs(); ++i) out.insert(out.end(), grad(i).begin(), grad(i).end());
    }
};

// Runs the checks of check/gradcheck.hpp on `target` (compiled once, in libxgrad).
GradcheckResult check_gradients(GradcheckTarget& target, const GradcheckOptions& opt);

}  // namespace detail
}  // namespace xgrad
