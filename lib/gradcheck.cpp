// gradcheck's checking (xgrad/check/gradcheck_core.hpp): the analytic gradients of a target against
// central finite differences, and the checks of accumulation, NoGrad and the cleared tape.
#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "xgrad/check/gradcheck_core.hpp"
#include "xgrad/core/error.hpp"
#include "xgrad/core/tape.hpp"

namespace xgrad {

std::string GradcheckResult::report() const {
    std::ostringstream os;
    os << (passed ? "gradcheck passed" : "gradcheck FAILED") << " (" << mode << "): max abs error "
       << max_abs_error << ", max rel error " << max_rel_error << "; worst: input " << worst_input << ' '
       << worst_where << " analytic " << analytic << " numeric " << numeric;
    if (!failure.empty()) os << "; " << failure;
    return os.str();
}

namespace detail {
namespace {

class GradientChecker {
public:
    GradientChecker(GradcheckTarget& target, const GradcheckOptions& opt) : t_(target), opt_(opt), rng_(opt.seed) {}

    GradcheckResult run() {
        Tape local;
        TapeScope scope(local);
        t_.record();
        if (!t_.output_requires_grad()) {
            fail("the output does not depend on any input");
            return res_;
        }
        const std::size_t m = t_.output().size();
        std::size_t n = 0;
        for (std::size_t i = 0; i < t_.inputs(); ++i) n += t_.input(i).size();
        const bool full = opt_.mode == GradcheckOptions::Mode::full ||
                          (opt_.mode == GradcheckOptions::Mode::automatic && n * m <= opt_.full_limit);
        res_.mode = full ? "full" : "fast";
        std::vector<double> seed(m, 0.0);
        const bool any_nonzero = full ? compare_jacobians(m) : compare_projections(seed);
        if (!any_nonzero && !opt_.allow_zero_grad) fail("the analytic gradient is all zero (backward wrote nothing?)");
        const std::vector<double> plain = t_.forward_values();
        for (std::size_t j = 0; j < m; ++j)
            if (!(std::abs(plain[j] - t_.output()[j]) <= opt_.atol)) {
                fail("the forward value differs between grad mode and NoGrad at output " + std::to_string(j));
                return res_;
            }
        if (opt_.check_accumulation) check_accumulation(seed);
        check_reuse(local, seed);
        return res_;
    }

private:
    GradcheckTarget& t_;
    GradcheckOptions opt_;
    std::mt19937_64 rng_;
    GradcheckResult res_;
    // The largest error so far, and how far the worst mismatch so far is past its tolerance (NaN
    // counts as infinite in both).
    double worst_error_ = -1;
    double worst_excess_ = -1;

    // Full mode: the analytic Jacobian J (m, n), one backward per output row, against central
    // differences, two forwards per input element (column). True when some analytic entry is nonzero.
    bool compare_jacobians(std::size_t m) {
        bool any_nonzero = false;
        std::vector<std::vector<double>> rows(m);
        std::vector<double> seed(m);
        for (std::size_t j = 0; j < m; ++j) {
            t_.zero_grads();
            std::fill(seed.begin(), seed.end(), 0.0);
            seed[j] = 1;
            t_.backward(seed);
            t_.append_grads(rows[j]);
            for (double g : rows[j]) any_nonzero |= g != 0;
        }
        std::size_t col = 0;
        for (std::size_t i = 0; i < t_.inputs(); ++i) {
            const std::span<double> x = t_.input(i);
            for (std::size_t k = 0; k < x.size(); ++k, ++col) {
                const double keep = x[k];
                x[k] = keep + opt_.eps;
                const std::vector<double> plus = t_.forward_values();
                x[k] = keep - opt_.eps;
                const std::vector<double> minus = t_.forward_values();
                x[k] = keep;
                for (std::size_t j = 0; j < m; ++j)
                    compare(i, "index " + unravel(t_.input_shape(i), k) + " output " + std::to_string(j), rows[j][col],
                            (plus[j] - minus[j]) / (2 * opt_.eps));
            }
        }
        return any_nonzero;
    }

    // Fast mode: per input, random projections vᵀ J u: analytic <dL/dx, u> for the seed v against
    // vᵀ (f(x + εu) − f(x − εu)) / 2ε. Leaves the last v in `seed`.
    bool compare_projections(std::vector<double>& seed) {
        bool any_nonzero = false;
        std::normal_distribution<double> normal;
        for (std::size_t i = 0; i < t_.inputs(); ++i) {
            const std::span<double> x = t_.input(i);
            for (int p = 0; p < opt_.projections; ++p) {
                for (double& s : seed) s = normal(rng_);
                std::vector<double> u(x.size());
                for (double& s : u) s = normal(rng_);
                t_.zero_grads();
                t_.backward(seed);
                double analytic = 0;
                const std::span<const double> g = t_.grad(i);
                for (std::size_t k = 0; k < u.size(); ++k) analytic += g[k] * u[k];
                any_nonzero |= analytic != 0;
                const std::vector<double> keep(x.begin(), x.end());
                for (std::size_t k = 0; k < x.size(); ++k) x[k] = keep[k] + opt_.eps * u[k];
                const std::vector<double> plus = t_.forward_values();
                for (std::size_t k = 0; k < x.size(); ++k) x[k] = keep[k] - opt_.eps * u[k];
                const std::vector<double> minus = t_.forward_values();
                std::copy(keep.begin(), keep.end(), x.begin());
                double numeric = 0;
                for (std::size_t j = 0; j < seed.size(); ++j) numeric += seed[j] * (plus[j] - minus[j]) / (2 * opt_.eps);
                compare(i, "projection " + std::to_string(p), analytic, numeric);
            }
        }
        return any_nonzero;
    }

    // Two backward calls from a random seed must give twice the gradient of one.
    void check_accumulation(std::vector<double>& seed) {
        std::normal_distribution<double> normal;
        for (double& s : seed) s = normal(rng_);
        t_.zero_grads();
        t_.backward(seed);
        std::vector<double> once, twice;
        t_.append_grads(once);
        t_.backward(seed);
        t_.append_grads(twice);
        for (std::size_t i = 0; i < once.size(); ++i)
            if (std::abs(twice[i] - 2 * once[i]) > 1e-9 * (1 + std::abs(once[i])))
                return fail("backward does not accumulate: a second backward gave " + std::to_string(twice[i]) +
                            " instead of twice " + std::to_string(once[i]));
    }

    // A second step on the cleared tape reuses every node's storage; it must give the same gradient.
    void check_reuse(Tape& local, const std::vector<double>& seed) {
        std::vector<double> first, second;
        for (int step = 0; step < 2; ++step) {
            if (step == 1) local.clear();
            t_.zero_grads();
            t_.record_again();
            t_.backward(seed);
            t_.append_grads(step == 0 ? first : second);
        }
        for (std::size_t i = 0; i < first.size(); ++i)
            if (!(std::abs(second[i] - first[i]) <= 1e-12 * (1 + std::abs(first[i]))))
                return fail("a step on the cleared tape (reused node storage) gave a different gradient");
    }

    void compare(std::size_t input, const std::string& where, double a, double n) {
        const double inf = std::numeric_limits<double>::infinity();
        const double err = std::abs(a - n);
        const double allowed = opt_.atol + opt_.rtol * std::abs(n);
        const bool ok = err <= allowed;  // NaN fails
        if (err == err) {
            res_.max_abs_error = std::max(res_.max_abs_error, err);
            if (std::abs(n) > opt_.atol) res_.max_rel_error = std::max(res_.max_rel_error, err / std::abs(n));
        } else {
            res_.max_abs_error = res_.max_rel_error = err;
        }
        if (const double e = err == err ? err : inf; e > worst_error_) {
            worst_error_ = e;
            res_.worst_input = input, res_.worst_where = where, res_.analytic = a, res_.numeric = n;
        }
        if (const double excess = err == err ? err - allowed : inf; !ok && excess > worst_excess_) {
            worst_excess_ = excess;
            res_.passed = false;
            std::ostringstream os;
            os << "mismatch at input " << input << ' ' << where << ": analytic " << a << " numeric " << n
               << ", |analytic - numeric| = " << err << " > atol + rtol*|numeric| = " << allowed;
            res_.failure = os.str();
        }
    }
    void fail(const std::string& why) {
        if (res_.passed) res_.failure = why;
        res_.passed = false;
    }
    static std::string unravel(const std::vector<std::size_t>& shape, std::size_t flat) {
        std::vector<std::size_t> idx(shape.size());
        for (std::size_t k = shape.size(); k-- > 0;) idx[k] = flat % shape[k], flat /= shape[k];
        return shape_str(idx);
    }
};

}  // namespace

GradcheckResult check_gradients(GradcheckTarget& target, const GradcheckOptions& opt) {
    return GradientChecker(target, opt).run();
}

}  // namespace detail
}  // namespace xgrad
