// `xgrad bench`: times the reference workload (workloads/mha.hpp, the same step as the libtorch
// peer in bench/) and prints one JSON line: median step time, useful GFLOP/s, OpenBLAS's own GEMM
// rate on the workload's largest GEMM and its kernel set, peak RSS and heap allocations of a
// steady step. `--model encoder_layer | transformer | masked_encoder` times a Transformer step instead
// (workloads/transformer.hpp, the workload of the libtorch_transformer peer): the same line without
// the GEMM rates; `--model gpt` a GPT training step (workloads/gpt.hpp, nanoGPT's and llm.c's
// workload) with its GFLOP/s by nanoGPT's estimate. Under mpirun each rank runs its even share of --batch of either step and the
// gradients are averaged (dist::DataParallel): rank 0 adds the world size, the global throughput
// and the time synchronize() took per step (the reduction not hidden behind backward).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cblas.h>
#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "commands/commands.hpp"
#include "commands/distributed.hpp"
#include "workloads/alloc_count.hpp"
#include "workloads/gpt.hpp"
#include "workloads/llama.hpp"
#include "workloads/mha.hpp"
#include "workloads/transformer.hpp"

namespace xgrad::cli {
namespace {

struct BenchOptions {
    std::string model = "mha";
    bench::MhaConfig config;
    std::size_t ffn = 2048, layers = 1, vocab = 50257;
    std::optional<std::size_t> kv_heads;  // llama: default --heads
    double dropout = 0.1;
    std::string dtype = "float32";
    int threads = 1;
    int steps = 50;
    int warmup = 5;
    bool overlap = true;
    nn::AttentionPath attention = nn::AttentionPath::automatic;
};

// The attention path a workload's calls run (mha: key padding; gpt, llama: causal; no weights returned,
// no dropout on them).
std::string attention_path_run(const BenchOptions& o, std::size_t batch) {
    const std::size_t L = o.config.seq;
    return nn::path_name(nn::detail::choose_path(o.attention, {.heads = batch * o.config.heads, .queries = L, .keys = L,
                                                               .causal = o.model == "gpt" || o.model == "llama",
                                                               .bfloat16 = o.dtype == "bfloat16"}));
}

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
}

// GFLOP/s of OpenBLAS alone, with its own `threads` threads, on the workload's in-projection GEMM
// (L·B, E) · (E, 3E). xgrad's GEMMs run OpenBLAS single-threaded (core/parallel.hpp), so its
// thread count is set for this measurement only.
template <Real T>
double blas_gflops(const bench::MhaConfig& c, int threads, int repeats) {
    const int m = int(c.seq * c.batch), k = int(c.embed), n = int(3 * c.embed);
    std::vector<T> a(std::size_t(m) * k, T(0.5)), b(std::size_t(k) * n, T(0.25)), y(std::size_t(m) * n);
    std::vector<double> us;
    openblas_set_num_threads(threads);
    for (int r = 0; r < repeats + 2; ++r) {
        const auto t0 = Clock::now();
        if constexpr (std::is_same_v<T, float>)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a.data(), k, b.data(), k, 0, y.data(), n);
        else
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1, a.data(), k, b.data(), k, 0, y.data(), n);
        if (r >= 2) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    openblas_set_num_threads(1);
    return 2.0 * double(m) * double(n) * double(k) / median(us) * 1e-3;
}

struct Timing {
    double median_us = 0, allocs_per_step = 0, loss = 0;
};

// Warm-up, then the timed steps (`step()` runs one and returns its loss), counting heap
// allocations; `after_step()` reads per-step counters outside the timing.
template <class Step, class AfterStep>
Timing time_steps(const BenchOptions& o, const Step& step, const AfterStep& after_step) {
    for (int i = 0; i < o.warmup; ++i) step();
    std::vector<double> us;
    us.reserve(std::size_t(o.steps));
    const std::uint64_t allocs_before = heap_allocations();
    Timing t;
    for (int i = 0; i < o.steps; ++i) {
        const auto t0 = Clock::now();
        t.loss = double(step());
        us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        after_step();
    }
    t.allocs_per_step = double(heap_allocations() - allocs_before) / o.steps;
    t.median_us = median(us);
    return t;
}

double peak_rss_mb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return double(usage.ru_maxrss) / 1024.0;
}

nlohmann::json allocs_json(const Timing& t) {
    return heap_allocations_counted() ? nlohmann::json(t.allocs_per_step) : nlohmann::json();
}

// Prints the JSON line with the data-parallel fields and the GEMM back end chosen for each shape
// class the step ran (kernels/gemm_choice.hpp; XGRAD_GEMM forces one).
void print_line(nlohmann::ordered_json line, const nlohmann::ordered_json& data_parallel) {
    line.update(data_parallel);
    nlohmann::ordered_json gemm = nlohmann::ordered_json::object();
    for (const auto& [shape_class, backend] : kernels::GemmChoices::instance().list()) gemm[shape_class] = backend;
    if (const auto forced = kernels::GemmChoices::instance().forced())  // XGRAD_GEMM: every float product
        gemm["forced (XGRAD_GEMM)"] = kernels::backend_name(*forced);
    line["gemm"] = gemm;
    fmt::print("{}\n", line.dump());
}

// The data-parallel fields of the JSON line (world size 1 outside mpirun: nothing to reduce).
template <Real T>
nlohmann::ordered_json data_parallel_json(const dist::Context& ctx, const BenchOptions& o, const Timing& t,
                                          const dist::DataParallel<T>& dp, const std::vector<double>& reduce_us) {
    return {{"world_size", ctx.world_size()},
            {"sequences_per_s", double(o.config.batch) / t.median_us * 1e6},
            {"reduce_us", ctx.world_size() > 1 ? nlohmann::json(median(reduce_us)) : nlohmann::json(0)},
            {"buckets", dp.bucket_count()},
            {"buckets_started_in_backward", dp.buckets_started_in_backward()}};
}

// Times workload.step(reduce) with the module's gradients averaged over the ranks by `reduce`;
// returns the timing and the data-parallel fields.
template <Real T, class Workload, class M>
std::pair<Timing, nlohmann::ordered_json> time_data_parallel(const BenchOptions& o, const dist::Context& ctx,
                                                             Workload& workload, M& module) {
    dist::DataParallel<T> data_parallel(ctx, module, {.overlap = o.overlap});
    const std::function<void()> reduce = [&] { data_parallel.synchronize(); };
    std::vector<double> reduce_us;
    reduce_us.reserve(std::size_t(o.steps));
    const Timing t = time_steps(o, [&] { return workload.step(reduce); },
                                [&] { reduce_us.push_back(data_parallel.last_sync_seconds() * 1e6); });
    return {t, data_parallel_json(ctx, o, t, data_parallel, reduce_us)};
}

template <Real T>
int run(const BenchOptions& o) {
    const dist::Context& ctx = process_group();
    const auto& c = o.config;
    const std::size_t my_batch = even_shard(ctx, c.batch, "--batch").size();
    if (o.model == "gpt") {
        bench::GptWorkload<T> workload({o.layers, c.heads, c.embed, o.vocab, my_batch, c.seq, o.attention});
        const auto [t, dp] = time_data_parallel<T>(o, ctx, workload, workload.module());
        if (!ctx.is_root()) return 0;
        nlohmann::ordered_json line = {
            {"impl", "xgrad"}, {"model", "gpt"}, {"L", o.layers}, {"H", c.heads}, {"C", c.embed}, {"V", o.vocab},
            {"B", c.batch}, {"T", c.seq}, {"dtype", o.dtype}, {"threads", o.threads}, {"steps", o.steps},
            {"median_us", t.median_us}, {"gflops", workload.flops() / t.median_us * 1e-3},
            {"peak_rss_mb", peak_rss_mb()}, {"allocs_per_step", allocs_json(t)}, {"last_loss", t.loss},
            {"attention", attention_path_run(o, my_batch)}};
        print_line(line, dp);
        return 0;
    }
    if (o.model == "llama") {
        const std::size_t kv_heads = o.kv_heads.value_or(c.heads);
        bench::LlamaWorkload<T> workload({o.layers, c.heads, kv_heads, c.embed, o.vocab, my_batch, c.seq, o.attention});
        const auto [t, dp] = time_data_parallel<T>(o, ctx, workload, workload.module());
        if (!ctx.is_root()) return 0;
        nlohmann::ordered_json line = {
            {"impl", "xgrad"}, {"model", "llama"}, {"L", o.layers}, {"H", c.heads}, {"KV", kv_heads}, {"C", c.embed},
            {"V", o.vocab}, {"B", c.batch}, {"T", c.seq}, {"dtype", o.dtype}, {"threads", o.threads}, {"steps", o.steps},
            {"median_us", t.median_us}, {"gflops", workload.flops() / t.median_us * 1e-3},
            {"peak_rss_mb", peak_rss_mb()}, {"allocs_per_step", allocs_json(t)}, {"last_loss", t.loss},
            {"attention", attention_path_run(o, my_batch)}};
        print_line(line, dp);
        return 0;
    }
    if (o.model != "mha") {
        bench::TransformerWorkload<T> workload({o.model, my_batch, c.seq, c.embed, c.heads, o.ffn, o.layers, o.dropout});
        const auto [t, dp] =
            workload.with_module([&](auto& module) { return time_data_parallel<T>(o, ctx, workload, module); });
        if (!ctx.is_root()) return 0;
        nlohmann::ordered_json line = {
            {"impl", "xgrad"}, {"model", o.model}, {"B", c.batch}, {"L", c.seq}, {"E", c.embed}, {"H", c.heads},
            {"ffn", o.ffn}, {"layers", o.layers}, {"dropout", o.dropout}, {"dtype", o.dtype}, {"threads", o.threads},
            {"steps", o.steps}, {"median_us", t.median_us}, {"peak_rss_mb", peak_rss_mb()},
            {"allocs_per_step", allocs_json(t)}, {"last_loss", t.loss}};
        print_line(line, dp);
        return 0;
    }
    bench::MhaConfig mine = c;
    mine.batch = my_batch, mine.path = o.attention;
    bench::MhaWorkload<T> workload(mine);
    const auto [t, dp] = time_data_parallel<T>(o, ctx, workload, workload.module());
    if (!ctx.is_root()) return 0;
    const double gflops = bench::useful_flops(c) / t.median_us * 1e-3;
    const double blas = blas_gflops<T>(c, o.threads, std::max(o.steps, 20));
    nlohmann::ordered_json line = {
        {"impl", "xgrad"}, {"B", c.batch}, {"L", c.seq}, {"E", c.embed}, {"H", c.heads}, {"dtype", o.dtype},
        {"threads", o.threads}, {"steps", o.steps}, {"median_us", t.median_us}, {"gflops", gflops},
        {"blas_gflops", blas}, {"blas_fraction", gflops / blas}, {"peak_rss_mb", peak_rss_mb()},
        {"allocs_per_step", allocs_json(t)}, {"last_loss", t.loss}, {"attention", attention_path_run(o, my_batch)}};
    // the kernels OpenBLAS picked for this CPU (e.g. Haswell or Cooperlake), which set its rate
    line["blas_core"] = openblas_get_corename();
    print_line(line, dp);
    return 0;
}

}  // namespace

void setup_bench(CLI::App& cmd) {
    static BenchOptions o;
    cmd.add_option("--model", o.model,
                   "mha (one MultiheadAttention step), encoder_layer, transformer, masked_encoder (3DETR's "
                   "per-layer masks), gpt (a GPT step: --layers, --heads, --embed, --vocab, --batch, --seq) or llama "
                   "(a Llama step: the same and --kv-heads)")
        ->check(CLI::IsMember({"mha", "encoder_layer", "transformer", "masked_encoder", "gpt", "llama"}));
    cmd.add_option("--batch", o.config.batch, "B")->check(between(1, 4096));
    cmd.add_option("--seq", o.config.seq, "L (query and key length)")->check(between(1, 65536));
    cmd.add_option("--embed", o.config.embed, "E")->check(between(1, 65536));
    cmd.add_option("--heads", o.config.heads, "H (must divide E)")->check(between(1, 65536));
    cmd.add_option("--ffn", o.ffn, "dim_feedforward (encoder_layer, transformer, masked_encoder)")
        ->check(between(1, 1 << 20));
    cmd.add_option("--vocab", o.vocab, "vocabulary (gpt, llama)")->check(between(1, 1 << 24));
    cmd.add_option("--kv-heads", o.kv_heads, "key/value heads (llama; must divide --heads; default: --heads)")
        ->check(between(1, 65536));
    cmd.add_option("--layers", o.layers,
                   "encoder and decoder layers each (transformer); encoder layers (masked_encoder); blocks (gpt, llama)")
        ->check(between(1, 64));
    cmd.add_option("--dropout", o.dropout, "dropout in training mode (encoder_layer, transformer, masked_encoder)")
        ->check(between(0, 1));
    cmd.add_option("--dtype", o.dtype,
                   "float32, float64, or bfloat16 (float32 with bfloat16 matmul operands: xgrad::Autocast)")
        ->check(CLI::IsMember({"float32", "float64", "bfloat16"}));
    cmd.add_option("--threads", o.threads, "threads (BLAS and attention)")->check(between(1, 256));
    const std::map<std::string, nn::AttentionPath> paths{
        {"automatic", nn::AttentionPath::automatic}, {"weights_and_context", nn::AttentionPath::weights_and_context},
        {"fused", nn::AttentionPath::fused}, {"memory_efficient", nn::AttentionPath::memory_efficient},
        {"reference", nn::AttentionPath::reference}};
    cmd.add_option("--attention", o.attention,
                   "the attention path (mha, gpt): automatic (by length: docs/performance.md), memory_efficient "
                   "(O(L) memory), fused or weights_and_context (O(L²)), reference (plain ops)")
        ->transform(CLI::CheckedTransformer(paths));
    cmd.add_option("--steps", o.steps, "timed steps after the warm-up")->check(between(1, 1000000));
    cmd.add_option("--warmup", o.warmup, "untimed steps first")->check(between(0, 1000000));
    cmd.add_flag("--overlap,!--no-overlap", o.overlap,
                 "under mpirun: start reducing gradients during backward (default on)");
    data_parallel_commands().insert(&cmd);
    cmd.callback([] {
        selected_action() = [] {
            if (o.model != "mha" && o.config.embed % o.config.heads != 0)
                throw value_error("--heads " + std::to_string(o.config.heads) + " must divide --embed " +
                                  std::to_string(o.config.embed));
            if (o.kv_heads && (o.model != "llama" || o.config.heads % *o.kv_heads != 0))
                throw value_error("--kv-heads " + std::to_string(*o.kv_heads) + " is for --model llama and must divide --heads " +
                                  std::to_string(o.config.heads));
            set_num_threads(std::size_t(o.threads));
            if (o.dtype == "float64") return run<double>(o);
            std::optional<Autocast> autocast;  // throws where bfloat16 matmuls cannot run natively
            if (o.dtype == "bfloat16") autocast.emplace(MatmulPrecision::bfloat16);
            return run<float>(o);
        };
    });
}

}  // namespace xgrad::cli
