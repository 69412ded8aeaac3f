// Which back end (gemm_backends.hpp) runs a product. Per shape class (element type, transposes, and
// the powers of two that bound m, n and k) the fastest available back end on this CPU: the first
// product of a class is timed on each (on its own operands, at the thread count of that moment),
// the winner is kept for the process and written to a file that every process on this machine
// shares, keyed by the CPU and the libraries. A rerun, a resumed run or another rank therefore
// makes the same choices, so results stay reproducible; the back end changes rounding only.
//   XGRAD_GEMM=xgrad|openblas|onednn   forces one (for float and bfloat16; double has no oneDNN and
//                                      chooses between the other two); auto or unset: measure
//   XGRAD_CACHE_DIR=DIR                 where the file goes (default $XDG_CACHE_HOME/xgrad, else
//                                      ~/.cache/xgrad); empty: no file, choices per process
#pragma once
#include <bit>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xgrad/kernels/gemm_backends.hpp"

namespace xgrad::kernels {

// The operands of a product: float, double, or bfloat16 (a float product under Autocast).
enum class GemmOperands : unsigned char { f32, f64, bf16 };

struct GemmClass {
    GemmOperands operands = GemmOperands::f32;
    bool a_trans = false, b_trans = false;
    unsigned char log_m = 0, log_n = 0, log_k = 0;  // ⌈log2⌉ of m, n, k
    auto operator<=>(const GemmClass&) const = default;
    std::string str() const;  // "f32 NT m<=2^6 n<=2^7 k<=2^6"
};
// T: float, double or bfloat16, the type of the operands.
template <class T>
GemmClass gemm_class(bool a_trans, bool b_trans, std::size_t m, std::size_t n, std::size_t k) {
    const auto log2_ceil = [](std::size_t v) { return (unsigned char)(std::bit_width(v - 1)); };
    const GemmOperands operands = std::is_same_v<T, double>     ? GemmOperands::f64
                                  : std::is_same_v<T, bfloat16> ? GemmOperands::bf16
                                                                : GemmOperands::f32;
    return {operands, a_trans, b_trans, log2_ceil(m), log2_ceil(n), log2_ceil(k)};
}

// The choices of one process (instance()) or of a test's own. Compiled in libxgrad (lib/gemm_choice.cpp).
class GemmChoices {
public:
    // The process's choices, configured by XGRAD_GEMM and the cache directory (above).
    static GemmChoices& instance();
    // forced: a back end's name, "auto", empty or null; cache_dir: empty for no file.
    GemmChoices(const char* forced, const std::string& cache_dir);
    ~GemmChoices();
    static std::string default_cache_dir();  // empty when there is no home directory

    // The back end for class `cls`; seconds_with(b) runs the product once with b and returns its time.
    template <class T, class Time>
    GemmBackend choose(const GemmClass& cls, Time&& seconds_with) {
        Available available{};
        for (std::size_t i = 0; i < std::size(all_gemm_backends); ++i)
            available[i] = backend_available<T>(all_gemm_backends[i]);
        using F = std::remove_reference_t<Time>;
        const Timer timer{const_cast<void*>(static_cast<const void*>(&seconds_with)),
                          [](void* f, GemmBackend b) { return double((*static_cast<F*>(f))(b)); }};
        return choose_among(cls, available, timer);
    }

    // Every choice made in this process so far, as (class, back end); `xgrad bench` prints them.
    std::vector<std::pair<std::string, std::string>> list() const;
    std::optional<GemmBackend> forced() const;
    const std::string& file() const;  // the cache file, or empty

private:
    using Available = bool[std::size(all_gemm_backends)];  // by all_gemm_backends' order
    struct Timer {  // seconds_with, without its type
        void* f;
        double (*call)(void*, GemmBackend);
        double operator()(GemmBackend b) const { return call(f, b); }
    };
    GemmBackend choose_among(const GemmClass& cls, const Available& available, const Timer& seconds_with);
    struct State;
    std::unique_ptr<State> state_;
};

}  // namespace xgrad::kernels
