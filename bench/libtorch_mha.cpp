// The libtorch peer of `xgrad bench`: the same training step (src/workloads/mha.hpp) in
// libtorch's C++ frontend, timed the same way. Built only with -Dlibtorch=enabled.
//   usage: libtorch_mha --batch B --seq L --embed E --heads H --dtype float32|float64
//                       --threads T --steps N [--warmup W]
// Prints one JSON line with "impl":"libtorch" and "median_us".
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace {

struct Args {
    long batch = 2, seq = 6, embed = 100, heads = 5, threads = 1, steps = 50, warmup = 5;
    std::string dtype = "float32";
};

template <class T>
double median_step_us(const Args& a) {
    const auto dtype = torch::CppTypeToScalarType<T>();
    torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(a.embed, a.heads));
    mha->to(dtype);
    torch::optim::Adam adam(mha->parameters(), torch::optim::AdamOptions(1e-3));
    const auto opts = torch::TensorOptions().dtype(dtype);
    const auto x = torch::randn({a.seq, a.batch, a.embed}, opts), target = torch::randn({a.seq, a.batch, a.embed}, opts);
    auto pad = torch::zeros({a.batch, a.seq}, torch::kBool);
    pad.index_put_({torch::indexing::Slice(), torch::indexing::Slice(a.seq - a.seq / 4)}, true);
    auto step = [&] {
        adam.zero_grad();
        const auto out = std::get<0>(mha->forward(x, x, x, pad, /*need_weights=*/false));
        torch::mse_loss(out, target).backward();
        adam.step();
    };
    for (long i = 0; i < a.warmup; ++i) step();
    std::vector<double> us;
    for (long i = 0; i < a.steps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        step();
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
    return us[us.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    Args a;
    std::map<std::string, long*> numbers{{"--batch", &a.batch},     {"--seq", &a.seq},     {"--embed", &a.embed},
                                         {"--heads", &a.heads},     {"--threads", &a.threads}, {"--steps", &a.steps},
                                         {"--warmup", &a.warmup}};
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i], value = argv[i + 1];
        if (flag == "--dtype" && (value == "float32" || value == "float64")) a.dtype = value;
        else if (numbers.count(flag) && std::atol(value.c_str()) > 0) *numbers[flag] = std::atol(value.c_str());
        else {
            std::fprintf(stderr, "libtorch_mha: bad argument %s %s\n", flag.c_str(), value.c_str());
            return 2;
        }
    }
    if (argc % 2 == 0 || a.embed % a.heads != 0) {
        std::fprintf(stderr, "libtorch_mha: usage: --batch B --seq L --embed E --heads H (H divides E) "
                             "--dtype float32|float64 --threads T --steps N [--warmup W]\n");
        return 2;
    }
    torch::manual_seed(0);
    torch::set_num_threads(int(a.threads));
    const double us = a.dtype == "float64" ? median_step_us<double>(a) : median_step_us<float>(a);
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    std::printf("{\"impl\":\"libtorch\",\"B\":%ld,\"L\":%ld,\"E\":%ld,\"H\":%ld,\"dtype\":\"%s\",\"threads\":%ld,"
                "\"steps\":%ld,\"median_us\":%.1f,\"peak_rss_mb\":%.1f}\n",
                a.batch, a.seq, a.embed, a.heads, a.dtype.c_str(), a.threads, a.steps, us, usage.ru_maxrss / 1024.0);
}
