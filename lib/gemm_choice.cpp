// The GEMM back end choices (include/xgrad/kernels/gemm_choice.hpp): timing the candidates, the
// process's table, and the cache file that processes on one machine share.
#include "xgrad/kernels/gemm_choice.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <xtensor/xtensor_config.hpp>

extern "C" char* openblas_get_config();

namespace xgrad::kernels {

std::string GemmClass::str() const {
    static constexpr const char* names[] = {"f32 ", "f64 ", "bf16 "};
    return std::string(names[int(operands)]) + (a_trans ? 'T' : 'N') + (b_trans ? 'T' : 'N') + " m<=2^" +
           std::to_string(log_m) + " n<=2^" + std::to_string(log_n) + " k<=2^" + std::to_string(log_k);
}

struct GemmChoices::State {
    mutable std::mutex mutex;
    std::map<GemmClass, GemmBackend> chosen;
    std::optional<GemmBackend> forced;
    std::string forced_error;
    std::string file;
};

namespace {

// What the choices depend on: the CPU (its family, model and feature flags: a VM may name every
// EPYC alike), this build's SIMD level and optimization, OpenBLAS's build and oneDNN's version; and a
// version of how xgrad feeds and times the back ends (v2: oneDNN in fixed panels; v3: repeated
// samples; v4: long k in panels; v5: one-row products as OpenBLAS's GEMV), so older choices go.
std::string identity() {
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
    out += "; onednn " + detail::onednn_version();
#endif
    return out;
}

std::optional<GemmBackend> find_in(std::istream& in, const GemmClass& cls) {
    const std::string key = cls.str() + '\t';
    for (std::string line; std::getline(in, line);)
        if (line.rfind(key, 0) == 0) return parse_backend(line.substr(key.size()));
    return std::nullopt;
}

// The choice another process recorded for cls in `file`, if any.
std::optional<GemmBackend> from_file(const std::string& file, const GemmClass& cls) {
    if (file.empty()) return std::nullopt;
    std::ifstream in(file);
    return find_in(in, cls);
}

// Appends cls → best to the file under a lock, unless another process recorded cls first: then
// its choice is returned, so that all processes agree.
GemmBackend record(const std::string& file, const GemmClass& cls, GemmBackend best) {
    if (file.empty()) return best;
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
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

// Each candidate's best time for one product. A first call each warms it up (oneDNN builds its
// kernel then); a second estimates it. Then samples of at least 50 µs each (a short product is
// repeated within a sample, as timer ticks and one interrupt would swamp one call), interleaved
// across the candidates so a slow phase of a shared machine hits all of them: 5 samples for a
// product under 1 ms, 3 under 30 ms, else 2 (the estimate counts as one).
template <class Time>
std::vector<double> best_times(const std::vector<GemmBackend>& candidates, const Time& seconds_with) {
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

// `available` is in all_gemm_backends' order, which is the enum's: a back end's value indexes it.
constexpr bool backends_in_enum_order = [] {
    for (std::size_t i = 0; i < std::size(all_gemm_backends); ++i)
        if (std::size_t(all_gemm_backends[i]) != i) return false;
    return true;
}();
static_assert(backends_in_enum_order);

}  // namespace

GemmChoices& GemmChoices::instance() {
    static GemmChoices choices(std::getenv("XGRAD_GEMM"), default_cache_dir());
    return choices;
}

GemmChoices::GemmChoices(const char* forced, const std::string& cache_dir) : state_(std::make_unique<State>()) {
    if (forced && *forced && std::string_view(forced) != "auto") {
        state_->forced = parse_backend(forced);
        if (!state_->forced)
            state_->forced_error =
                std::string("XGRAD_GEMM: unknown GEMM back end '") + forced + "' (xgrad, openblas, onednn or auto)";
        else if (!backend_available<float>(*state_->forced))
            state_->forced_error = std::string("XGRAD_GEMM=") + forced + ": this build of xgrad has no such back end " +
                                   (*state_->forced == GemmBackend::onednn ? "(built without oneDNN)"
                                                                           : "(needs an AVX-512 build)");
    }
    if (cache_dir.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    std::uint64_t hash = 14695981039346656037ULL;  // FNV-1a: the same name in every program
    for (unsigned char ch : identity()) hash = (hash ^ ch) * 1099511628211ULL;
    std::ostringstream name;
    name << "gemm-" << std::hex << hash << ".txt";
    state_->file = (std::filesystem::path(cache_dir) / name.str()).string();
}

GemmChoices::~GemmChoices() = default;

std::string GemmChoices::default_cache_dir() {
    if (const char* dir = std::getenv("XGRAD_CACHE_DIR")) return dir;
    if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (std::filesystem::path(xdg) / "xgrad").string();
    if (const char* home = std::getenv("HOME"); home && *home) return (std::filesystem::path(home) / ".cache/xgrad").string();
    return {};
}

GemmBackend GemmChoices::choose_among(const GemmClass& cls, const Available& available, const Timer& seconds_with) {
    State& s = *state_;
    if (!s.forced_error.empty()) throw value_error(s.forced_error);
    if (s.forced && available[std::size_t(*s.forced)]) return *s.forced;
    const std::lock_guard lock(s.mutex);
    if (const auto it = s.chosen.find(cls); it != s.chosen.end()) return it->second;
    std::vector<GemmBackend> candidates;
    for (GemmBackend b : all_gemm_backends)
        if (available[std::size_t(b)]) candidates.push_back(b);
    GemmBackend best = candidates.front();
    if (candidates.size() > 1) {
        if (const auto recorded = from_file(s.file, cls); recorded && available[std::size_t(*recorded)]) {
            best = *recorded;
        } else {
            const std::vector<double> fastest = best_times(candidates, seconds_with);
            // In the order xgrad, openblas, onednn, a later one must be 3 % faster to be chosen:
            // noise does not flip choices, and oneDNN (whose calls allocate) wins only clearly.
            std::size_t pick = 0;
            for (std::size_t i = 1; i < candidates.size(); ++i)
                if (fastest[i] < 0.97 * fastest[pick]) pick = i;
            best = record(s.file, cls, candidates[pick]);
        }
    }
    s.chosen.emplace(cls, best);
    return best;
}

std::vector<std::pair<std::string, std::string>> GemmChoices::list() const {
    const std::lock_guard lock(state_->mutex);
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& [cls, b] : state_->chosen) out.emplace_back(cls.str(), backend_name(b));
    return out;
}

std::optional<GemmBackend> GemmChoices::forced() const { return state_->forced; }

const std::string& GemmChoices::file() const { return state_->file; }

}  // namespace xgrad::kernels
