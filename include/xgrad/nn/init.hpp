// Parameter initializers, as torch.nn.init (in place on a parameter's value, drawing from a
// seeded Generator so a run is reproducible).
#pragma once
#include <cmath>
#include <string>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/random.hpp"
#include "xgrad/core/var.hpp"

namespace xgrad::init {

// fan_in, fan_out as torch: a (out, in, k...) tensor has fan_in = in·k..., fan_out = out·k...
template <Real T, std::size_t N>
std::pair<double, double> fans(const Var<T, N>& p) {
    static_assert(N >= 1, "xgrad: fan computation needs rank >= 1");
    xgrad::require_var(p, "fans", "the parameter");
    if constexpr (N == 1) {
        return {double(p.shape(0)), double(p.shape(0))};
    } else {
        double receptive = 1;
        for (std::size_t k = 2; k < N; ++k) receptive *= double(p.shape(k));
        return {double(p.shape(1)) * receptive, double(p.shape(0)) * receptive};
    }
}

template <Real T, std::size_t N>
void uniform_(Var<T, N>& p, double lo, double hi, Generator& gen) {
    xgrad::require_var(p, "uniform_", "the parameter");
    if (!(std::isfinite(lo) && std::isfinite(hi) && lo <= hi))
        throw value_error("uniform_: needs finite bounds lo <= hi, got lo " + std::to_string(lo) + " and hi " +
                          std::to_string(hi) + " for a parameter of shape " + shape_str(p.shape()));
    for (auto& v : p.value()) v = T(gen.uniform(lo, hi));
}
template <Real T, std::size_t N>
void normal_(Var<T, N>& p, double mean, double std, Generator& gen) {
    xgrad::require_var(p, "normal_", "the parameter");
    if (!(std::isfinite(mean) && std::isfinite(std) && std >= 0))
        throw value_error("normal_: needs a finite mean and a finite std >= 0, got mean " + std::to_string(mean) +
                          " and std " + std::to_string(std) + " for a parameter of shape " + shape_str(p.shape()));
    gen.normal(p.value().data(), p.size(), mean, std);
}
template <Real T, std::size_t N>
void constant_(Var<T, N>& p, double value) {
    xgrad::require_var(p, "constant_", "the parameter");
    p.value().fill(T(value));
}
// U(-b, b), b = gain · sqrt(6 / (fan_in + fan_out))
template <Real T, std::size_t N>
void xavier_uniform_(Var<T, N>& p, Generator& gen, double gain = 1) {
    xgrad::require_var(p, "xavier_uniform_", "the parameter");
    const auto [in, out] = fans(p);
    if (p.size() == 0) return;  // zero-element: a no-op, as torch (the bound would be infinite)
    const double b = gain * std::sqrt(6.0 / (in + out));
    uniform_(p, -b, b, gen);
}
// N(0, s²), s = gain · sqrt(2 / (fan_in + fan_out))
template <Real T, std::size_t N>
void xavier_normal_(Var<T, N>& p, Generator& gen, double gain = 1) {
    xgrad::require_var(p, "xavier_normal_", "the parameter");
    const auto [in, out] = fans(p);
    if (p.size() == 0) return;
    normal_(p, 0, gain * std::sqrt(2.0 / (in + out)), gen);
}
// torch's kaiming_uniform_(a, mode='fan_in', nonlinearity='leaky_relu'): b = sqrt(6 / ((1 + a²) fan_in)).
// nn.Linear uses a = sqrt(5), which gives b = 1 / sqrt(fan_in).
template <Real T, std::size_t N>
void kaiming_uniform_(Var<T, N>& p, double a, Generator& gen) {
    xgrad::require_var(p, "kaiming_uniform_", "the parameter");
    const double fan_in = fans(p).first;
    if (p.size() == 0) return;  // zero-element: a no-op, as torch (fan_in may be 0)
    const double b = std::sqrt(6.0 / ((1 + a * a) * fan_in));
    uniform_(p, -b, b, gen);
}

}  // namespace xgrad::init

// Compiled once in libxgrad (xgrad/core/compiled.hpp): for parameters of rank 1 to 3.
namespace xgrad {
#define XGRAD_DETAIL_INIT_COMPILED(EXTERN, T, N)                                               \
    EXTERN template void init::uniform_<T, N>(Var<T, N>&, double, double, Generator&);         \
    EXTERN template void init::normal_<T, N>(Var<T, N>&, double, double, Generator&);          \
    EXTERN template void init::constant_<T, N>(Var<T, N>&, double);                            \
    EXTERN template void init::xavier_uniform_<T, N>(Var<T, N>&, Generator&, double);          \
    EXTERN template void init::xavier_normal_<T, N>(Var<T, N>&, Generator&, double);           \
    EXTERN template void init::kaiming_uniform_<T, N>(Var<T, N>&, double, Generator&);
#define XGRAD_DETAIL_INITS_COMPILED(EXTERN, T)                                     \
    XGRAD_DETAIL_INIT_COMPILED(EXTERN, T, 1) XGRAD_DETAIL_INIT_COMPILED(EXTERN, T, 2) \
    XGRAD_DETAIL_INIT_COMPILED(EXTERN, T, 3)
XGRAD_COMPILED_IN(nn, XGRAD_DETAIL_INITS_COMPILED)
#undef XGRAD_DETAIL_INITS_COMPILED
#undef XGRAD_DETAIL_INIT_COMPILED
}  // namespace xgrad
