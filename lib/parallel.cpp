// xgrad's worker threads (include/xgrad/core/parallel.hpp says how a loop is split and why):
// the pool behind parallel_for, compiled once here.
#include "xgrad/core/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <cblas.h>
#include <sched.h>

namespace xgrad::detail {
namespace {

// Waits until ready() is true: polls (a pause instruction per test) for up to poll_budget,
// yielding the core at every 64th test on which crowded() says that a thread it waits for runs
// on this core; then sleeps on wake_ under mutex_, counted in sleepers_ so that the thread that
// makes ready() true knows to notify (it changes what ready() reads before it reads sleepers_,
// all seq_cst: either the waiter sees the change before it sleeps or the notifier sees the
// sleeper).
class Waiter {
public:
    static constexpr auto poll_budget = std::chrono::microseconds(1000);

    template <class Ready, class Crowded>
    void wait(const Ready& ready, const Crowded& crowded) {
        const auto start = std::chrono::steady_clock::now();
        for (unsigned i = 1; !ready(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
            if (i % 64 != 0) continue;
            if (crowded()) std::this_thread::yield();
            if (std::chrono::steady_clock::now() - start > poll_budget) {
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
        backoff_ = {}, serial_until_ = {};  // lost splits are forgotten
        if (n == threads()) return;
        stop_.store(true);
        job_posted_.notify();
        for (auto& w : workers_) w.join();
        workers_.clear();
        stop_.store(false);
        worker_cpus_ = std::make_unique<std::atomic<int>[]>(n);
        for (std::size_t i = 1; i < n; ++i) {
            worker_cpus_[i - 1].store(-1);
            workers_.emplace_back([this, i] { work(worker_cpus_[i - 1]); });
        }
    }

    // Runs body(context, begin, end) over [0, n) in `chunks` contiguous chunks, on every thread.
    // Returns false, running nothing, when another thread is using the pool or after a split that
    // lost (see below).
    bool run(std::size_t n, std::size_t chunks, void (*body)(const void*, std::size_t, std::size_t), const void* context) {
        if (busy_.exchange(true)) return false;
        if (backoff_ != Clock::duration{} && Clock::now() < serial_until_) {
            busy_.store(false);
            return false;
        }
        caller_cpu_.store(sched_getcpu(), std::memory_order_relaxed);
        const std::size_t job = (generation_.load() + 1) & job_mask;
        n_ = n, body_ = body, context_ = context;
        done_.store(0), worker_started_.store(false);
        handout_.store(pack(job, chunks, 0));  // chunks are handed out from here on
        generation_.fetch_add(1);
        job_posted_.notify();
        const auto start = Clock::now();
        const std::size_t mine = take_chunks(true, job);
        const auto worked = Clock::now();
        job_done_.wait([&] { return done_.load() == chunks; }, [&] { return on_a_worker_core(); });
        const auto finished = Clock::now();
        // A split lost when it took longer than the caller alone would have (its time per chunk
        // times all chunks): a worker was preempted inside its chunk, the cores are busy with
        // other programs. Loops then run serially for backoff_: 1 ms, doubled by each consecutive
        // loss up to 256 ms, halved by a split that a worker helped with and that did not lose
        // (one the caller ran alone proves nothing). Counted in time, not in loops, so that a
        // lost split of a small loop does not hold up the large ones for long.
        const bool helped = mine > 0 && mine < chunks;
        const bool lost = helped && (finished - start) * mine > (worked - start) * chunks;
        if (lost) {
            backoff_ = std::clamp<Clock::duration>(2 * backoff_, std::chrono::milliseconds(1), std::chrono::milliseconds(256));
            serial_until_ = finished + backoff_;
        } else if (helped) {
            backoff_ = backoff_ < std::chrono::milliseconds(2) ? Clock::duration{} : backoff_ / 2;
        }
        busy_.store(false);
        return true;
    }

private:
    using Clock = std::chrono::steady_clock;
    // OpenBLAS starts with one thread per core; xgrad's default is one thread in all, so the pool
    // pins OpenBLAS to one as it comes to life, before the first GEMM reaches OpenBLAS.
    ThreadPool() { openblas_set_num_threads(1); }

    // Runs chunks of job number `job` until none is left; returns how many it ran. The caller
    // (by_caller), after its first chunk, takes all the chunks left as one range when no worker
    // has started one. A chunk is taken by one compare-and-swap on handout_, which holds the job's
    // number and chunk count beside the next chunk: a worker that woke for an earlier job (it may
    // be descheduled anywhere) can never take, skip or count a chunk of the current one.
    std::size_t take_chunks(bool by_caller, std::size_t job) {
        inside_parallel_loop() = true;
        std::size_t taken = 0;
        for (;;) {
            std::size_t word = handout_.load(), chunks = 0, first = 0, last = 0;
            bool got = false;
            while (!got) {
                chunks = (word >> index_bits) & index_mask, first = word & index_mask;
                if ((word >> job_shift) != job || first >= chunks) break;
                const bool rest = by_caller && taken > 0 && !worker_started_.load();
                last = rest ? chunks : first + 1;
                got = handout_.compare_exchange_weak(word, pack(job, chunks, last));
            }
            if (!got) break;
            if (!by_caller) worker_started_.store(true);
            body_(context_, n_ * first / chunks, n_ * last / chunks);
            taken += last - first;
            if (done_.fetch_add(last - first) + (last - first) == chunks) job_done_.notify();
        }
        inside_parallel_loop() = false;
        return taken;
    }
    // handout_'s word: the job's number, its chunk count, the next chunk to hand out.
    static constexpr unsigned index_bits = 20, job_shift = 2 * index_bits;
    static constexpr std::size_t index_mask = (std::size_t(1) << index_bits) - 1;
    static constexpr std::size_t job_mask = (std::size_t(1) << (64 - job_shift)) - 1;
    static std::size_t pack(std::size_t job, std::size_t chunks, std::size_t next) {
        return (job << job_shift) | (chunks << index_bits) | next;
    }

    // True when a worker last polled or ran on this thread's core.
    bool on_a_worker_core() const {
        const int cpu = sched_getcpu();
        for (std::size_t i = 0; i < workers_.size(); ++i)
            if (worker_cpus_[i].load(std::memory_order_relaxed) == cpu) return true;
        return false;
    }

    void work(std::atomic<int>& my_cpu) {
        std::size_t seen = 0;
        const auto on_the_callers_core = [&] {
            const int cpu = sched_getcpu();
            my_cpu.store(cpu, std::memory_order_relaxed);
            return cpu == caller_cpu_.load(std::memory_order_relaxed);
        };
        for (;;) {
            job_posted_.wait([&] { return stop_.load() || generation_.load() != seen; }, on_the_callers_core);
            if (stop_.load()) return;
            seen = generation_.load();
            my_cpu.store(sched_getcpu(), std::memory_order_relaxed);
            take_chunks(false, seen & job_mask);
        }
    }

    std::vector<std::thread> workers_;
    std::unique_ptr<std::atomic<int>[]> worker_cpus_;  // the core each worker last polled or ran on
    std::atomic<int> caller_cpu_{-1};                  // the core of the last job's caller
    Waiter job_posted_, job_done_;  // workers wait for a job; the caller for its last chunk
    std::atomic<bool> stop_{false};
    std::atomic<std::size_t> generation_{0};
    // The job. n_, body_ and context_ are written before handout_ is, and read only after a
    // compare-and-swap on handout_ gave this thread a chunk of the same job, which orders them.
    std::size_t n_ = 0;
    void (*body_)(const void*, std::size_t, std::size_t) = nullptr;
    const void* context_ = nullptr;
    std::atomic<std::size_t> handout_{0}, done_{0};
    std::atomic<bool> busy_{false}, worker_started_{false};  // worker_started_: of the current job
    Clock::duration backoff_{};  // after lost splits (run); read under busy_
    Clock::time_point serial_until_{};
};

}  // namespace

bool run_on_pool(std::size_t n, std::size_t chunks, void (*body)(const void*, std::size_t, std::size_t),
                 const void* context) {
    return ThreadPool::instance().run(n, chunks, body, context);
}
bool& inside_parallel_loop() {
    thread_local bool inside = false;
    return inside;
}

}  // namespace xgrad::detail

namespace xgrad {

void set_num_threads(std::size_t n) {
    if (n == 0) throw value_error("set_num_threads: the thread count must be positive, got 0");
    openblas_set_num_threads(1);
    detail::ThreadPool::instance().resize(n);
}

std::size_t num_threads() { return detail::ThreadPool::instance().threads(); }

}  // namespace xgrad
