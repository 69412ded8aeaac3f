// The process group of a data-parallel run: MPI_COMM_WORLD, initialized once and finalized when
// the Context goes out of scope.
//
//   int main(int argc, char** argv) {
//       return xgrad::dist::run(argc, argv, [&](xgrad::dist::Context& ctx) {
//           ... ctx.rank(), ctx.world_size() ...
//           return 0;
//       });
//   }
//
// A process started without mpirun (no OMPI_COMM_WORLD_SIZE or PMIX_RANK in its environment) is
// world size 1, rank 0, and makes no MPI call at all. A program compiled without XGRAD_HAVE_MPI
// (xgrad built with -Dmpi=disabled or without Open MPI, or a consumer not using xgrad-dist.pc) runs
// everything as world size 1 and refuses to start under mpirun: N independent copies training side
// by side would be a silent wrong result.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#if XGRAD_HAVE_MPI
#include <mpi.h>
#endif

#include "xgrad/core/error.hpp"

namespace xgrad::dist {

// A collective failed or the process group is misused (message names the call and the rank).
struct dist_error : error {
    using error::error;
};

// True when an MPI launcher (Open MPI's mpirun, or any PMIx launcher) started this process.
inline bool launched_by_mpirun() {
    return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

constexpr bool built_with_mpi() {
#if XGRAD_HAVE_MPI
    return true;
#else
    return false;
#endif
}

class Context {
public:
    Context() : Context(nullptr, nullptr) {}
    Context(int* argc, char*** argv) {
        if (!launched_by_mpirun()) return;
#if XGRAD_HAVE_MPI
        int initialized = 0, finalized = 0;
        MPI_Initialized(&initialized);
        MPI_Finalized(&finalized);
        if (initialized || finalized)
            throw dist_error("dist::Context: MPI is already initialized or was finalized: create one Context per process");
        MPI_Init(argc, argv);
        // Errors come back as codes (turned into dist_error), not as an abort inside MPI.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
        active_ = true;
        uncaught_at_start_ = std::uncaught_exceptions();
        current() = this;
#else
        (void)argc, (void)argv;
        throw dist_error(
            "this program runs under mpirun but was compiled without xgrad's MPI support (XGRAD_HAVE_MPI "
            "undefined): every rank would train alone. Build it with pkg-config's xgrad-dist (meson: "
            "dependency('xgrad-dist')), installed when xgrad itself was built with Open MPI, or run it without mpirun");
#endif
    }
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    // Finalizes MPI. Left by an exception nobody caught inside the scope, the job is aborted
    // instead: the other ranks may be waiting in a collective this rank will never join.
    ~Context() {
#if XGRAD_HAVE_MPI
        if (!active_) return;
        if (std::uncaught_exceptions() > uncaught_at_start_) {
            std::fprintf(stderr, "xgrad: rank %d left its dist::Context by an exception; ending the job\n", rank_);
            abort(1);
        }
        current() = nullptr;
        MPI_Finalize();
#endif
    }

    int rank() const { return rank_; }
    int world_size() const { return world_size_; }
    bool is_root() const { return rank_ == 0; }
    // True when MPI was initialized (started by mpirun), even with one rank.
    bool active() const { return active_; }

    // Ends every rank of the job with exit status `code` (MPI_Abort), or this process alone.
    // Ranks other than 0 wait 2 s first: when every rank fails alike (a bad option), rank 0's
    // abort ends the job alone. Open MPI 4.1's mpirun can crash (SIGSEGV in its PMIx log handler,
    // after "ORTE_ERROR_LOG: Out of resource in show_help.c") when aborts from several ranks reach
    // it at once: seen once in about 25 runs of `dist-train-sort` under the sanitizers with a
    // 200 ms wait, and with it once across two hosts (2 × 2 ranks, TCP), where rank 0's abort takes
    // longer to end the other host's ranks.
    [[noreturn]] void abort(int code) const {
        std::fflush(stdout);
        std::fflush(stderr);
#if XGRAD_HAVE_MPI
        if (active_ && rank_ > 0) std::this_thread::sleep_for(std::chrono::seconds(2));
        if (active_) MPI_Abort(MPI_COMM_WORLD, code);
#endif
        std::_Exit(code);
    }

    // The Context alive in this process, or nullptr.
    static Context*& current() {
        static Context* ctx = nullptr;
        return ctx;
    }

private:
    int rank_ = 0, world_size_ = 1;
    bool active_ = false;
    int uncaught_at_start_ = 0;
};

// How a program ends on an exception: one line on stderr, "WHO: message" ("WHO: rank 1: message" in
// a job of several ranks), its newlines folded and written at once so that ranks do not interleave.
// Under mpirun (`ctx` active) it then ends every rank with exit status 2 (MPI_Abort): the others may
// wait for this one forever. Otherwise it returns 2, the exit status of an xgrad error or bad input.
// `ctx` is null when no process group was made. dist::run and the xgrad tool's main() end this way.
inline int report_failure(const std::string& who, const std::exception& e, const Context* ctx) {
    std::string message = e.what();
    for (char& c : message)
        if (c == '\n') c = ' ';
    std::string line = who;
    if (ctx && ctx->world_size() > 1) line += ": rank " + std::to_string(ctx->rank());
    line += ": " + message + '\n';
    std::fprintf(stderr, "%s", line.c_str());
    if (ctx && ctx->active()) ctx->abort(2);
    return 2;
}

// Runs body(ctx) inside a Context. An exception escaping it on any rank prints that rank's one-line
// message ("xgrad: rank 1: ...") and ends the whole job with exit status 2 (MPI_Abort), never a
// hang; outside mpirun the message is printed and 2 returned (report_failure).
template <class Body>
int run(int argc, char** argv, Body&& body) {
    std::optional<Context> ctx;
    try {
        ctx.emplace(&argc, &argv);
        return body(*ctx);
    } catch (const std::exception& e) {
        // also when the Context could not be made (MPI missing under mpirun)
        return report_failure("xgrad", e, ctx ? &*ctx : nullptr);
    }
}

}  // namespace xgrad::dist
