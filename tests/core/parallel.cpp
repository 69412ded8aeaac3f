// xgrad's threads: parallel_for covers every index once, nests serially, stays serial for small
// work and splits only into shares worth a thread, reaches polling and sleeping workers; GEMMs,
// MultiheadAttention and Adam give the same results on 1 and 2 threads.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace test_core_parallel {

using namespace xgrad;

// Restores one thread when a test ends, whatever happened.
struct Threads {
    explicit Threads(std::size_t n) { set_num_threads(n); }
    ~Threads() { set_num_threads(1); }
};

TEST_CASE("parallel_for covers [0, n) exactly once, in disjoint ranges") {
    Threads two(2);
    CHECK(num_threads() == 2);
    for (std::size_t n : {2, 3, 1000}) {
        set_num_threads(2);  // forgets a split that lost (the bodies are too small to pay)
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        parallel_for(n, 1e12, [&](std::size_t begin, std::size_t end) {
            ++calls;
            for (std::size_t i = begin; i < end; ++i) ++hits[i];
        });
        for (std::size_t i = 0; i < n; ++i) CHECK(hits[i] == 1);
        // chunks: 2 (n = 2, 3) or 4 (n = 1000), a multiple of the threads; the calling thread
        // takes whatever chunks are left in one range when the worker has not started one
        CHECK(calls >= 2);
        CHECK(calls <= (n == 1000 ? 4 : 2));
    }
}

TEST_CASE("parallel_for runs serially for little work, inside another loop, and on one thread") {
    Threads two(2);
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    parallel_for(100, parallel_min_work / 2, [&](std::size_t b, std::size_t e) { ranges.push_back({b, e}); });
    CHECK(ranges == std::vector<std::pair<std::size_t, std::size_t>>{{0, 100}});

    std::atomic<int> inner_calls{0};
    parallel_for(2, 1e12, [&](std::size_t, std::size_t) {
        parallel_for(50, 1e12, [&](std::size_t b, std::size_t e) {
            CHECK(b == 0);
            CHECK(e == 50);
            ++inner_calls;
        });
    });
    CHECK(inner_calls == 2);

    set_num_threads(1);
    ranges.clear();
    parallel_for(100, 1e12, [&](std::size_t b, std::size_t e) { ranges.push_back({b, e}); });
    CHECK(ranges == std::vector<std::pair<std::size_t, std::size_t>>{{0, 100}});
    CHECK_THROWS_WITH_AS(set_num_threads(0), "set_num_threads: the thread count must be positive, got 0", value_error);
}

TEST_CASE("parallel_for splits only into shares of at least parallel_min_share flops") {
    // The chunks of a split loop, each of at least parallel_min_share flops, as many as the
    // threads or twice as many (a late worker then still finds one); ranges_of counts the calls
    // of the body, fewer when the calling thread took the chunks left in one range.
    const auto ranges_of = [](double shares) {
        set_num_threads(num_threads());  // forgets a split that lost (the bodies are too small to pay)
        std::atomic<int> calls{0};
        std::vector<std::atomic<int>> hits(1000);
        parallel_for(1000, shares * parallel_min_share, [&](std::size_t begin, std::size_t end) {
            ++calls;
            // a few µs of work, so that the worker can take a chunk
            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
            while (std::chrono::steady_clock::now() < until) {}
            for (std::size_t i = begin; i < end; ++i) ++hits[i];
        });
        for (auto& h : hits) REQUIRE(h == 1);
        return calls.load();
    };
    {
        Threads two(2);
        CHECK(ranges_of(1.9) == 1);
        CHECK(ranges_of(2.0) == 2);
        CHECK(ranges_of(3.9) == 2);  // 3 chunks would leave one thread a chunk behind
        const int many = ranges_of(50);
        CHECK(many >= 2);
        CHECK(many <= 4);  // never more than twice the threads
    }
    Threads three(3);
    CHECK(ranges_of(1.9) == 1);
    CHECK(ranges_of(2.5) == 2);  // 2 shares: the third thread would get less than one
    const int three_shares = ranges_of(3.0);
    CHECK(three_shares >= 2);  // the caller took the last two in one range when no worker came in time
    CHECK(three_shares <= 3);
}

TEST_CASE("loops right after one another and after a pause reach polling and sleeping workers alike") {
    Threads two(2);
    const std::size_t n = 64;
    for (int round = 0; round < 300; ++round) {
        // no pause, 20 µs and 200 µs (the worker still polls), 3 ms (past the poll budget: it sleeps)
        const int pause_us[] = {0, 20, 200, 3000};
        std::this_thread::sleep_for(std::chrono::microseconds(pause_us[round % 4]));
        std::vector<int> hits(n, 0);  // each range writes its own elements only
        parallel_for(n, 1e12, [&](std::size_t begin, std::size_t end) {
            for (std::size_t i = begin; i < end; ++i) hits[i] += 1;
        });
        for (std::size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
    }
}

TEST_CASE("a GEMM split over 2 threads equals the naive product, for every transpose, in place, with a bias") {
    const std::size_t m = 150, n = 90, k = 200, lda_pad = 3;  // 5.4 MFLOP: split (parallel_min_work)
    for (auto op_a : {kernels::Op::none, kernels::Op::trans})
        for (auto op_b : {kernels::Op::none, kernels::Op::trans})
            for (bool tall : {true, false})  // split by rows (m >= n) or by columns (the bias split with them)
                for (bool with_bias : {false, true}) {
                    const std::size_t M = tall ? m : n, N = tall ? n : m;
                    const std::size_t a_rows = op_a == kernels::Op::none ? M : k, a_cols = op_a == kernels::Op::none ? k : M;
                    const std::size_t b_rows = op_b == kernels::Op::none ? k : N, b_cols = op_b == kernels::Op::none ? N : k;
                    const auto a = randn<2>({a_rows, a_cols + lda_pad}, 1), b = randn<2>({b_rows, b_cols + lda_pad}, 2);
                    const auto c0 = randn<2>({M, N + lda_pad}, 3);
                    const xt::xtensor<double, 1> bias = randn<1>({N}, 4);
                    const double* bias_or_null = with_bias ? bias.data() : nullptr;
                    auto c1 = c0, c2 = c0;
                    kernels::gemm(op_a, op_b, M, N, k, 0.5, a.data(), a_cols + lda_pad, b.data(), b_cols + lda_pad, 2.0,
                               c1.data(), N + lda_pad, bias_or_null);
                    {
                        Threads two(2);
                        kernels::gemm(op_a, op_b, M, N, k, 0.5, a.data(), a_cols + lda_pad, b.data(), b_cols + lda_pad, 2.0,
                                   c2.data(), N + lda_pad, bias_or_null);
                    }
                    double worst = 0;
                    for (std::size_t i = 0; i < M; ++i)
                        for (std::size_t j = 0; j < N + lda_pad; ++j) {
                            double want = c0(i, j);  // the padding columns stay untouched
                            if (j < N) {
                                double dot = 0;
                                for (std::size_t t = 0; t < k; ++t)
                                    dot += (op_a == kernels::Op::none ? a(i, t) : a(t, i)) *
                                           (op_b == kernels::Op::none ? b(t, j) : b(j, t));
                                want = 0.5 * dot + 2.0 * c0(i, j) + (with_bias ? bias(j) : 0.0);
                            }
                            worst = std::max({worst, std::abs(c1(i, j) - want), std::abs(c2(i, j) - want)});
                        }
                    CHECK(worst < 1e-11);
                }
}

TEST_CASE("MultiheadAttention forward and backward on 2 threads match 1 thread") {
    auto run = [](std::size_t threads) {
        Threads t(threads);
        Tape tape;
        TapeScope scope(tape);
        Generator gen(5);
        // big enough for both the GEMMs and the (batch, head) loops to run in parallel
        nn::MultiheadAttention<double> mha({.embed_dim = 128, .num_heads = 4, .batch_first = true}, gen);
        auto x = parameter(randn<3>({8, 64, 128}, 6));
        nn::MhaForwardOptions<double> fo;
        fo.is_causal = true;
        auto r = mha.forward(x, x, x, fo);
        backward(r.output, xt::xtensor<double, 3>(randn<3>({8, 64, 128}, 7)));
        return std::vector<xt::xarray<double>>{r.output.value(), x.grad(), mha.in_proj_weight.grad(),
                                               mha.out_proj.weight.grad()};
    };
    const auto one = run(1), two = run(2);
    for (std::size_t i = 0; i < one.size(); ++i) {
        CHECK(xt::amax(xt::abs(one[i]))() > 1e-3);
        CHECK(xt::amax(xt::abs(one[i] - two[i]))() < 1e-12);
    }
}

TEST_CASE("Adam and the gradients' zero-fill split over 2 threads give exactly the 1-thread results") {
    // a (600, 1024) weight: Adam's update and the zero-fill of its gradient both split over threads
    auto run = [](std::size_t threads) {
        Threads t(threads);
        Generator gen(3);
        nn::Linear<double> lin(1024, 600, gen);
        optim::Adam opt(lin, {.lr = 1e-2, .weight_decay = 0.1, .amsgrad = true});
        xt::xtensor<double, 2> last_grad;
        for (unsigned step = 0; step < 3; ++step) {
            xgrad::zero_grad(lin);
            backward(lin.weight, xt::xtensor<double, 2>(randn<2>({600, 1024}, 20 + step)));
            last_grad = lin.weight.grad();
            opt.step();
        }
        return std::pair{xt::xtensor<double, 2>(lin.weight.value()), last_grad};
    };
    const auto [w1, g1] = run(1);
    const auto [w2, g2] = run(2);
    CHECK(g2 == xt::xtensor<double, 2>(randn<2>({600, 1024}, 22)));  // re-zeroed, not accumulated
    CHECK(w2 == w1);
    Generator gen(3);
    CHECK(xt::amax(xt::abs(w1 - nn::Linear<double>(1024, 600, gen).weight.value()))() > 1e-3);  // it moved
}

}  // namespace test_core_parallel
