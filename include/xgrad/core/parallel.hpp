// xgrad's own threads: set_num_threads(n) starts n − 1 workers that, with the calling thread,
// run parallel_for loops (the GEMMs of blas.hpp split into row blocks, the (batch, head) loops of
// attention). OpenBLAS always runs single-threaded inside, so threads never oversubscribe the
// cores and OpenBLAS's threaded driver never mallocs its per-call buffers. A loop inside a loop
// runs serially on the thread that reached it. After set_num_threads, dispatching a loop
// allocates nothing.
//
// Splitting must not lose (docs/performance.md, bench/threads.sh): a loop is split only into
// shares of at least parallel_min_share flops each; a thread between loops spins for spin_budget
// before it sleeps, so a training step's back-to-back loops reach awake workers (waking a
// sleeping thread through the kernel costs some 5-10 µs, as much as a small GEMM's share saves);
// and after a split that lost (a worker late: other programs hold the cores) loops run serially
// for a while (ThreadPool::run).
//
//   xgrad::set_num_threads(2);
//   xgrad::parallel_for(n, flops, [&](std::size_t begin, std::size_t end) { ... });  // disjoint ranges
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <cblas.h>

#include "xgrad/core/error.hpp"

namespace xgrad {
namespace detail {

// Waits until ready() is true: spins for spin_budget (a pause instruction per test), then sleeps
// on wake_ under mutex_, counted in sleepers_ so that the thread that makes ready() true knows
// to notify (it changes what ready() reads before it reads sleepers_, all seq_cst: either the
// waiter sees the change before it sleeps or the notifier sees the sleeper).
class Waiter {
public:
    static constexpr auto spin_budget = std::chrono::microseconds(50);

    template <class Ready>
    void wait(const Ready& ready) {
        const auto deadline = std::chrono::steady_clock::now() + spin_budget;
        for (unsigned i = 1; !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) {
                std::unique_lock lock(mutex_);
                ++sleepers_;
                wake_.wait(lock, ready);
                --sleepers_;
                return;
            }
        }
    }
    // Call after making a waiter's ready() true.
    void notify() {
        if (sleepers_.load() == 0) return;
        { std::lock_guard lock(mutex_); }  // a waiter between its test and its sleep holds the mutex
        wake_.notify_all();
    }

private:
    std::mutex mutex_;
    std::condition_variable wake_;
    std::atomic<std::size_t> sleepers_{0};
};

class ThreadPool {
public:
    static ThreadPool& instance() {
        static ThreadPool pool;
        return pool;
    }
    ~ThreadPool() { resize(1); }

    std::size_t threads() const { return workers_.size() + 1; }

    void resize(std::size_t n) {
        serial_run_ = serial_loops_left_ = 0;  // lost splits are forgotten
        if (n == threads()) return;
        stop_.store(true);
        job_posted_.notify();
        for (auto& w : workers_) w.join();
        workers_.clear();
        stop_.store(false);
        for (std::size_t i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
    }

    // Runs body(context, begin, end) over [0, n) in `chunks` contiguous chunks, on every thread.
    // Returns false, running nothing, when another thread is using the pool or after a split that
    // lost (see below).
    bool run(std::size_t n, std::size_t chunks, void (*body)(const void*, std::size_t, std::size_t), const void* context) {
        if (busy_.exchange(true)) return false;
        if (serial_loops_left_ > 0) {
            --serial_loops_left_;
            busy_.store(false);
            return false;
        }
        next_.store(no_chunk);  // a worker still leaving the last job gets no chunk of this one
        n_ = n, body_ = body, context_ = context;
        chunks_.store(chunks), done_.store(0);
        next_.store(0);  // chunks are handed out from here on
        generation_.fetch_add(1);
        job_posted_.notify();
        const auto start = std::chrono::steady_clock::now();
        take_chunks();
        const auto worked = std::chrono::steady_clock::now();
        job_done_.wait([&] { return done_.load() == chunks; });
        // A split lost when the caller waited for the others longer than it worked itself (one
        // thread alone would have been done sooner): a worker was preempted, the cores are busy
        // with other programs. The next loops then run serially: 1, 3, 7, ... up to 1023 of them
        // after consecutive losses, half as many after a split that paid, so a contended machine
        // only probes now and then.
        const bool lost = std::chrono::steady_clock::now() - worked > worked - start;
        serial_run_ = lost ? std::min<std::size_t>(2 * serial_run_ + 1, 1023) : serial_run_ / 2;
        serial_loops_left_ = serial_run_;
        busy_.store(false);
        return true;
    }

    static bool& inside() {
        thread_local bool in_parallel_region = false;
        return in_parallel_region;
    }

private:
    ThreadPool() = default;

    void take_chunks() {
        inside() = true;
        for (std::size_t c; (c = next_.fetch_add(1)) < chunks_;) {
            body_(context_, n_ * c / chunks_, n_ * (c + 1) / chunks_);
            if (done_.fetch_add(1) + 1 == chunks_) job_done_.notify();
        }
        inside() = false;
    }

    void work() {
        std::size_t seen = 0;
        for (;;) {
            job_posted_.wait([&] { return stop_.load() || generation_.load() != seen; });
            if (stop_.load()) return;
            seen = generation_.load();
            take_chunks();
        }
    }

    std::vector<std::thread> workers_;
    Waiter job_posted_, job_done_;  // workers wait for a job; the caller for its last chunk
    std::atomic<bool> stop_{false};
    std::atomic<std::size_t> generation_{0};
    // The job. n_, body_ and context_ are read only after next_ handed out a chunk of the current
    // job, which orders them after their writes; a worker waking late may test chunks_ while the
    // next job is set up, so chunks_ is atomic.
    std::size_t n_ = 0;
    void (*body_)(const void*, std::size_t, std::size_t) = nullptr;
    const void* context_ = nullptr;
    std::atomic<std::size_t> chunks_{0}, next_{0}, done_{0};
    static constexpr std::size_t no_chunk = std::size_t(1) << 62;
    std::atomic<bool> busy_{false};
    std::size_t serial_run_ = 0, serial_loops_left_ = 0;  // after lost splits (run); read under busy_
};

}  // namespace detail

// Threads for xgrad's loops and GEMMs (1: everything on the calling thread, the default); also
// forgets earlier lost splits (ThreadPool::run). Not to be called while another thread runs
// xgrad ops.
inline void set_num_threads(std::size_t n) {
    if (n == 0) throw value_error("set_num_threads: the thread count must be positive, got 0");
    openblas_set_num_threads(1);
    detail::ThreadPool::instance().resize(n);
}
inline std::size_t num_threads() { return detail::ThreadPool::instance().threads(); }

// Each thread's share of a split loop is at least this many flops: a smaller share saves less
// than handing it to another thread costs (the wake-up, the data crossing between cores).
inline constexpr double parallel_min_share = 1 << 21;
// The least work that is split at all: two shares.
inline constexpr double parallel_min_work = 2 * parallel_min_share;

// Calls body(begin, end) on disjoint ranges covering [0, n): in parallel, in as many ranges as
// there are threads and shares of parallel_min_share in `work` (an estimate of the total flops),
// when that is at least 2, this is not already inside a parallel loop and no other thread is
// using the pool; otherwise once, body(0, n). body must not throw.
template <class Body>
void parallel_for(std::size_t n, double work, const Body& body) {
    auto& pool = detail::ThreadPool::instance();
    const double shares = work / parallel_min_share;
    const std::size_t chunks = std::min({n, pool.threads(), shares < 2 ? std::size_t(1) : std::size_t(shares)});
    if (chunks > 1 && !detail::ThreadPool::inside()) {
        const auto call = [](const void* b, std::size_t begin, std::size_t end) {
            (*static_cast<const Body*>(b))(begin, end);
        };
        if (pool.run(n, chunks, call, &body)) return;
    }
    if (n > 0) body(std::size_t(0), n);
}

// std::fill(p, p + n, value), split over xgrad's threads when large (memory-bound: a few MB).
template <class T>
void parallel_fill(T* p, std::size_t n, T value) {
    parallel_for(n, 8.0 * double(n), [&](std::size_t begin, std::size_t end) { std::fill(p + begin, p + end, value); });
}

}  // namespace xgrad
