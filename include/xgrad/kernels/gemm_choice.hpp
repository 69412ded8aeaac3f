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
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <compare>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <xtensor/xtensor_config.hpp>

#include "xgrad/kernels/gemm_backends.hpp"

extern "C" char* openblas_get_config();

namespace xgrad::kernels {

// The operands of a product: float, double, or bfloat16 (a float product under Autocast).
enum class GemmOperands : unsigned char { f32, f64, bf16 };

struct GemmClass {
    GemmOperands operands = GemmOperands::f32;
    bool a_trans = false, b_trans = false;
    unsigned char log_m = 0, log_n = 0, log_k = 0;  // ⌈log2⌉ of m, n, k
    auto operator<=>(const GemmClass&) const = default;

    std::string str() const {
        static constexpr const char* names[] = {"f32 ", "f64 ", "bf16 "};
        return std::string(names[int(operands)]) + (a_trans ? 'T' : 'N') + (b_trans ? 'T' : 'N') + " m<=2^" +
               std::to_string(log_m) + " n<=2^" + std::to_string(log_n) + " k<=2^" + std::to_string(log_k);
    }
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

class GemmChoices {
public:
    // The process's choices, configured by XGRAD_GEMM and the cache directory (above).
    static GemmChoices& instance() {
        static GemmChoices choices(std::getenv("XGRAD_GEMM"), default_cache_dir());
        return choices;
    }
    // forced: a back end's name, "auto", empty or null; cache_dir: empty for no file.
    GemmChoices(const char* forced, const std::filesystem::path& cache_dir) {
        if (forced && *forced && std::string_view(forced) != "auto") {
            forced_ = parse_backend(forced);
            if (!forced_)
                forced_error_ = std::string("XGRAD_GEMM: unknown GEMM back end '") + forced +
                                "' (xgrad, openblas, onednn or auto)";
            else if (!backend_available<float>(*forced_))
                forced_error_ = std::string("XGRAD_GEMM=") + forced + ": this build of xgrad has no such back end " +
                                (*forced_ == GemmBackend::onednn ? "(built without oneDNN)" : "(needs an AVX-512 build)");
        }
        if (cache_dir.empty()) return;
        std::error_code ec;
        std::filesystem::create_directories(cache_dir, ec);
        std::uint64_t hash = 14695981039346656037ULL;  // FNV-1a: the same name in every program
        for (unsigned char ch : identity()) hash = (hash ^ ch) * 1099511628211ULL;
        std::ostringstream name;
        name << "gemm-" << std::hex << hash << ".txt";
        file_ = cache_dir / name.str();
    }
    static std::filesystem::path default_cache_dir() {
        if (const char* dir = std::getenv("XGRAD_CACHE_DIR")) return dir;
        if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "xgrad";
        if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache/xgrad";
        return {};
    }

    // The back end for class `cls`; seconds_with(b) runs the product once with b and returns its time.
    template <class T, class Time>
    GemmBackend choose(const GemmClass& cls, Time&& seconds_with) {
        if (!forced_error_.empty()) throw value_error(forced_error_);
        if (forced_ && backend_available<T>(*forced_)) return *forced_;
        const std::lock_guard lock(mutex_);
        if (const auto it = chosen_.find(cls); it != chosen_.end()) return it->second;
        std::vector<GemmBackend> candidates;
        for (GemmBackend b : all_gemm_backends)
            if (backend_available<T>(b)) candidates.push_back(b);
        GemmBackend best = candidates.front();
        if (candidates.size() > 1) {
            if (const auto recorded = from_file(cls); recorded && backend_available<T>(*recorded)) {
                best = *recorded;
            } else {
                const std::vector<double> fastest = best_times(candidates, seconds_with);
                // In the order xgrad, openblas, onednn, a later one must be 3 % faster to be chosen:
                // noise does not flip choices, and oneDNN (whose calls allocate) wins only clearly.
                std::size_t pick = 0;
                for (std::size_t i = 1; i < candidates.size(); ++i)
                    if (fastest[i] < 0.97 * fastest[pick]) pick = i;
                best = record(cls, candidates[pick]);
            }
        }
        chosen_.emplace(cls, best);
        return best;
    }

    // Every choice made in this process so far, as (class, back end); `xgrad bench` prints them.
    std::vector<std::pair<std::string, std::string>> list() const {
        const std::lock_guard lock(mutex_);
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& [cls, b] : chosen_) out.emplace_back(cls.str(), backend_name(b));
        return out;
    }
    std::optional<GemmBackend> forced() const { return forced_; }
    const std::filesystem::path& file() const { return file_; }

private:
    // Each candidate's best time for one product. A first call each warms it up (oneDNN builds its
    // kernel then); a second estimates it. Then samples of at least 50 µs each (a short product is
    // repeated within a sample, as timer ticks and one interrupt would swamp one call), interleaved
    // across the candidates so a slow phase of a shared machine hits all of them: 5 samples for a
    // product under 1 ms, 3 under 30 ms, else 2 (the estimate counts as one).
    template <class Time>
    static std::vector<double> best_times(const std::vector<GemmBackend>& candidates, Time& seconds_with) {
        for (GemmBackend b : candidates) seconds_with(b);
        std::vector<double> best(candidates.size());
        for (std::size_t i = 0; i < candidates.size(); ++i) best[i] = seconds_with(candidates[i]);
        const double shortest = *std::min_element(best.begin(), best.end()),
                     longest = *std::max_element(best.begin(), best.end());
        const int samples = longest < 1e-3 ? 4 : longest < 0.03 ? 2 : 1;
        const int repeats = int(std::clamp(std::ceil(50e-6 / std::max(shortest, 1e-9)), 1.0, 1000.0));
        for (int s = 0; s < samples; ++s)
            for (std::size_t i = 0; i < candidates.size(); ++i) {
                double total = 0;
                for (int r = 0; r < repeats; ++r) total += seconds_with(candidates[i]);
                best[i] = std::min(best[i], total / repeats);
            }
        return best;
    }

    mutable std::mutex mutex_;
    std::map<GemmClass, GemmBackend> chosen_;
    std::optional<GemmBackend> forced_;
    std::string forced_error_;
    std::filesystem::path file_;

    // What the choices depend on: the CPU (its family, model and feature flags: a VM may name every
    // EPYC alike), this build's SIMD level and optimization, OpenBLAS's build and oneDNN's version; and a
    // version of how xgrad feeds and times the back ends (v2: oneDNN in fixed panels; v3: repeated
    // samples; v4: long k in panels; v5: one-row products as OpenBLAS's GEMV), so older choices go.
    static std::string identity() {
        std::ifstream cpuinfo("/proc/cpuinfo");
        std::string line, out = "gemm choices v5;";
        int fields = 0;
        while (fields < 4 && std::getline(cpuinfo, line))
            for (const char* key : {"vendor_id", "cpu family", "model\t", "flags"})
                if (line.rfind(key, 0) == 0) out += line + ";", ++fields;
        out += " simd alignment " + std::to_string(XTENSOR_DEFAULT_ALIGNMENT) + "; openblas " + openblas_get_config();
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__)  // xgrad's kernel at -O0 or under ASan is slow
        out += "; optimized";
#else
        out += "; unoptimized or sanitized";
#endif
#if XGRAD_HAVE_ONEDNN
        const dnnl_version_t* v = dnnl_version();
        out += "; onednn " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
#endif
        return out;
    }

    // The choice another process recorded for cls, if any.
    std::optional<GemmBackend> from_file(const GemmClass& cls) const {
        if (file_.empty()) return std::nullopt;
        std::ifstream in(file_);
        return find_in(in, cls);
    }
    static std::optional<GemmBackend> find_in(std::istream& in, const GemmClass& cls) {
        const std::string key = cls.str() + '\t';
        for (std::string line; std::getline(in, line);)
            if (line.rfind(key, 0) == 0) return parse_backend(line.substr(key.size()));
        return std::nullopt;
    }

    // Appends cls → best to the file under a lock, unless another process recorded cls first:
    // then its choice is returned, so that all processes agree.
    GemmBackend record(const GemmClass& cls, GemmBackend best) const {
        if (file_.empty()) return best;
        const int fd = ::open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) return best;  // an unwritable cache: this process's own choice
        GemmBackend result = best;
        if (::flock(fd, LOCK_EX) == 0) {
            std::string text;
            char buffer[4096];
            for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, std::size_t(got));
            std::istringstream in(text);
            if (const auto earlier = find_in(in, cls)) {
                result = *earlier;
            } else {
                std::string line = (text.empty() ? "# " + identity() + "\n" : std::string()) + cls.str() + '\t' +
                                   backend_name(best) + '\n';
                if (::write(fd, line.data(), line.size()) < 0) { /* the choice still holds in this process */ }
            }
            ::flock(fd, LOCK_UN);
        }
        ::close(fd);
        return result;
    }
};

}  // namespace xgrad::kernels
