// Attribution patching (AtP) and exact activation patching of every head and every head × position
// (inspect/patching.hpp) on a GPT, beside one training step of the same shape; bench/patching_compare.sh
// runs it alternately with bench/patching_torch.py, the same three with PyTorch hooks on nanoGPT's
// model.py:   patching_speed L H C V T ROUNDS
// One thread, batch 1, nanoGPT's init; clean and corrupted ids random (seeded); the metric is the
// logit difference of a random token and the one V/2 after it at the last position; the exact sweep runs 256 rows a
// forward. Prints one JSON line: the median over ROUNDS of each, in ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "workloads/gpt.hpp"
#include "xgrad/core/parallel.hpp"
#include "xgrad/inspect/patching.hpp"

using namespace xgrad;

int main(int argc, char** argv) {
    if (argc != 7) {
        std::fprintf(stderr, "usage: patching_speed L H C V T ROUNDS\n");
        return 2;
    }
    const auto arg = [&](int i) { return std::size_t(std::strtoul(argv[i], nullptr, 10)); };
    const std::size_t L = arg(1), H = arg(2), C = arg(3), V = arg(4), T = arg(5), rounds = std::max<std::size_t>(1, arg(6));
    set_num_threads(1);
    bench::GptWorkload<float> workload({.layers = L, .heads = H, .embed = C, .vocab = V, .batch = 1, .seq = T});
    nn::GPT<float>& model = workload.module();
    Generator gen(7);
    patching::Ids clean({std::size_t(1), T}), corrupt({std::size_t(1), T});
    for (auto& id : clean) id = std::int64_t(gen.uniform() * double(V));
    for (auto& id : corrupt) id = std::int64_t(gen.uniform() * double(V));
    const std::int64_t correct = std::int64_t(gen.uniform() * double(V)), wrong = (correct + std::int64_t(V / 2)) % std::int64_t(V);
    const patching::Metric metric{.correct = {correct}, .wrong = {wrong}};
    const patching::PatchSets heads{.resid_pre = false, .attn_out = false, .mlp_out = false};

    using clock = std::chrono::steady_clock;
    const auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    std::vector<double> step, atp, exact;
    double atp_sum = 0, exact_sum = 0;
    workload.step();  // warm: buffers, oneDNN's primitives
    for (std::size_t r = 0; r < rounds; ++r) {
        auto t0 = clock::now();
        workload.step();
        step.push_back(ms(t0, clock::now()));
        set_training(model, false);
        t0 = clock::now();
        const patching::Result a = patching::attribution_patching(model, clean, corrupt, metric, heads);
        atp.push_back(ms(t0, clock::now()));
        tape().clear();
        t0 = clock::now();
        const patching::Result e = patching::activation_patching(model, clean, corrupt, metric, 256, heads);
        exact.push_back(ms(t0, clock::now()));
        set_training(model, true);
        atp_sum = xt::sum(a.head_pos)(), exact_sum = xt::sum(e.head_pos)() - double(L * H * T) * e.into;
    }
    const auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    std::printf("{\"impl\": \"xgrad\", \"L\": %zu, \"H\": %zu, \"C\": %zu, \"V\": %zu, \"T\": %zu, \"rounds\": %zu, "
                "\"train_step_ms\": %.2f, \"atp_ms\": %.2f, \"exact_ms\": %.1f, \"atp_sum\": %.6g, \"exact_sum\": %.6g}\n",
                L, H, C, V, T, rounds, median(step), median(atp), median(exact), atp_sum, exact_sum);
}
