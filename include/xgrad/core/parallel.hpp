// xgrad's own threads: set_num_threads(n) starts n − 1 workers that, with the calling thread,
// run parallel_for loops (the GEMMs of blas.hpp split into row blocks, the (batch, head) loops of
// attention). OpenBLAS always runs single-threaded inside, so threads never oversubscribe the
// cores and OpenBLAS's threaded driver never mallocs its per-call buffers. A loop inside a loop
// runs serially on the thread that reached it. After set_num_threads, dispatching a loop
// allocates nothing.
//
//   xgrad::set_num_threads(2);
//   xgrad::parallel_for(n, flops, [&](std::size_t begin, std::size_t end) { ... });  // disjoint ranges
#pragma once
#include <algorithm>
#include <atomic>
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

class ThreadPool {
public:
    static ThreadPool& instance() {
        static ThreadPool pool;
        return pool;
    }
    ~ThreadPool() { resize(1); }

    std::size_t threads() const { return workers_.size() + 1; }

    void resize(std::size_t n) {
        if (n == threads()) return;
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        wake_.notify_all();
        for (auto& w : workers_) w.join();
        workers_.clear();
        stop_ = false;
        for (std::size_t i = 1; i < n; ++i) workers_.emplace_back([this] { work(); });
    }

    // Runs body(context, begin, end) over [0, n) in `chunks` contiguous chunks, on every thread.
    // Returns false, running nothing, when another thread is using the pool.
    bool run(std::size_t n, std::size_t chunks, void (*body)(const void*, std::size_t, std::size_t), const void* context) {
        if (busy_.exchange(true)) return false;
        {
            std::lock_guard lock(mutex_);
            next_.store(no_chunk);  // a worker still leaving the last job gets no chunk of this one
            n_ = n, body_ = body, context_ = context;
            chunks_.store(chunks), done_.store(0);
            next_.store(0);  // chunks are handed out from here on
            ++generation_;
        }
        wake_.notify_all();
        take_chunks();
        {
            std::unique_lock lock(mutex_);
            finished_.wait(lock, [&] { return done_.load() == chunks_; });
        }
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
            if (done_.fetch_add(1) + 1 == chunks_) {
                std::lock_guard lock(mutex_);
                finished_.notify_one();
            }
        }
        inside() = false;
    }

    void work() {
        std::size_t seen = 0;
        for (;;) {
            {
                std::unique_lock lock(mutex_);
                wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
                if (stop_) return;
                seen = generation_;
            }
            take_chunks();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, finished_;
    bool stop_ = false;
    std::size_t generation_ = 0;
    // The job. n_, body_ and context_ are read only after next_ handed out a chunk of the current
    // job, which orders them after their writes; a worker waking late may test chunks_ while the
    // next job is set up, so chunks_ is atomic.
    std::size_t n_ = 0;
    void (*body_)(const void*, std::size_t, std::size_t) = nullptr;
    const void* context_ = nullptr;
    std::atomic<std::size_t> chunks_{0}, next_{0}, done_{0};
    static constexpr std::size_t no_chunk = std::size_t(1) << 62;
    std::atomic<bool> busy_{false};
};

}  // namespace detail

// Threads for xgrad's loops and GEMMs (1: everything on the calling thread, the default). Not to
// be called while another thread runs xgrad ops.
inline void set_num_threads(std::size_t n) {
    if (n == 0) throw value_error("set_num_threads: the thread count must be positive, got 0");
    openblas_set_num_threads(1);
    detail::ThreadPool::instance().resize(n);
}
inline std::size_t num_threads() { return detail::ThreadPool::instance().threads(); }

// Below this many flops a loop runs serially: waking a worker costs some 10 µs.
inline constexpr double parallel_min_work = 1 << 22;

// Calls body(begin, end) on disjoint ranges covering [0, n), in parallel when xgrad has more than
// one thread, `work` (an estimate of the total flops) is at least parallel_min_work, this is not
// already inside a parallel loop and no other thread is using the pool; otherwise once,
// body(0, n). body must not throw.
template <class Body>
void parallel_for(std::size_t n, double work, const Body& body) {
    auto& pool = detail::ThreadPool::instance();
    const std::size_t threads = pool.threads();
    if (threads > 1 && n > 1 && work >= parallel_min_work && !detail::ThreadPool::inside()) {
        const auto call = [](const void* b, std::size_t begin, std::size_t end) {
            (*static_cast<const Body*>(b))(begin, end);
        };
        if (pool.run(n, std::min(n, threads), call, &body)) return;
    }
    if (n > 0) body(std::size_t(0), n);
}

// std::fill(p, p + n, value), split over xgrad's threads when large (memory-bound: a few MB).
template <class T>
void parallel_fill(T* p, std::size_t n, T value) {
    parallel_for(n, 8.0 * double(n), [&](std::size_t begin, std::size_t end) { std::fill(p + begin, p + end, value); });
}

}  // namespace xgrad
