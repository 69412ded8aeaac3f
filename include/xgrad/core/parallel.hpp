// xgrad's own threads: set_num_threads(n) starts n − 1 workers that, with the calling thread,
// run parallel_for loops (the GEMMs of blas.hpp split into row blocks, the (batch, head) loops of
// attention). OpenBLAS always runs single-threaded inside, so threads never oversubscribe the
// cores and OpenBLAS's threaded driver never mallocs its per-call buffers. A loop inside a loop
// runs serially on the thread that reached it. After set_num_threads, dispatching a loop
// allocates nothing.
//
// Splitting must not lose (docs/performance.md, bench/threads.sh):
// - a loop is split only into chunks of at least parallel_min_share flops each, as many as the
//   threads or twice as many;
// - the calling thread takes chunks too and never waits for a worker that has not started one:
//   when no worker has started by the end of its first chunk, it takes all the chunks left in one
//   range, so a late or absent worker costs one extra call of the body;
// - a thread between loops polls for the next one for up to poll_budget before it sleeps (a
//   step's loops come tens to hundreds of µs apart, and waking a sleeping thread costs 5-50 µs on
//   a VM), but yields its core whenever it polls on the core of the thread it waits for: a worker
//   the scheduler put on the caller's core must not take the caller's time;
// - after a split that lost (a worker preempted inside its chunk: other programs hold the cores)
//   loops run serially for a while (the pool: lib/parallel.cpp).
//
//   xgrad::set_num_threads(2);
//   xgrad::parallel_for(n, flops, [&](std::size_t begin, std::size_t end) { ... });  // disjoint ranges
#pragma once
#include <algorithm>
#include <cstddef>
#include <utility>

#include "xgrad/core/error.hpp"
#include "xgrad/core/precision.hpp"

namespace xgrad {
namespace detail {
// The pool of worker threads is compiled in libxgrad (lib/parallel.cpp).
// Runs body(context, begin, end) over [0, n) in `chunks` contiguous chunks, on every thread.
// Returns false, running nothing, when another thread is using the pool or after a split that
// lost (loops then run serially for a while).
bool run_on_pool(std::size_t n, std::size_t chunks, void (*body)(const void*, std::size_t, std::size_t),
                 const void* context);
bool& inside_parallel_loop();  // this thread is running a chunk of a split loop
}  // namespace detail

// Threads for xgrad's loops and GEMMs (1: everything on the calling thread, the default, also
// for OpenBLAS in a program that never calls this); also forgets earlier lost splits. Not to be
// called while another thread runs xgrad ops.
void set_num_threads(std::size_t n);
std::size_t num_threads();

// Each chunk of a split loop is at least this many flops: a smaller one saves less than handing
// it to another thread costs (the notification, the data crossing between cores).
inline constexpr double parallel_min_share = 1 << 21;
// The least work that is split at all: two shares.
inline constexpr double parallel_min_work = 2 * parallel_min_share;
// A split loop has as many chunks as threads, or twice as many when the work holds that many
// shares: a worker that arrives late then still finds chunks to take.
inline constexpr std::size_t parallel_chunks_per_thread = 2;

// Calls body(begin, end) on disjoint ranges covering [0, n): in parallel, in chunks of at least
// parallel_min_share in `work` (an estimate of the total flops), a multiple of the threads when
// there are enough shares, when that is at least 2 chunks, this is not already inside a parallel
// loop and no other thread is using the pool; otherwise once, body(0, n). body must not throw.
template <class Body>
void parallel_for(std::size_t n, double work, const Body& body) {
    const std::size_t threads = num_threads();
    const double shares = work / parallel_min_share;
    const std::size_t most =
        std::min({n, parallel_chunks_per_thread * threads, shares < 2 ? std::size_t(1) : std::size_t(shares)});
    const std::size_t chunks = threads == 1 ? 1 : most >= threads ? most / threads * threads : most;
    if (chunks > 1 && !detail::inside_parallel_loop()) {
        // every chunk runs in the caller's matmul precision (Autocast is per thread)
        const std::pair<const Body*, MatmulPrecision> job{&body, detail::matmul_precision()};
        const auto call = [](const void* j, std::size_t begin, std::size_t end) {
            const auto& [job_body, precision] = *static_cast<const std::pair<const Body*, MatmulPrecision>*>(j);
            detail::MatmulPrecisionScope caller_precision(precision);
            (*job_body)(begin, end);
        };
        if (detail::run_on_pool(n, chunks, call, &job)) return;
    }
    if (n > 0) body(std::size_t(0), n);
}

// std::fill(p, p + n, value), split over xgrad's threads when large (memory-bound: a few MB).
template <class T>
void parallel_fill(T* p, std::size_t n, T value) {
    parallel_for(n, 8.0 * double(n), [&](std::size_t begin, std::size_t end) { std::fill(p + begin, p + end, value); });
}

}  // namespace xgrad
