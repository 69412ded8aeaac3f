// The latency of one small allreduce (8 bytes: one double) over the ranks of a job: the cost every
// step pays at least once (the global loss), and what shows a transport that stalls (docs/distributed.md,
// "On a real cluster": busy polling on a small machine across hosts).
//
//   mpirun -np 2 bench/dist_latency [--count 2000]
//
// Prints rank 0's median, 10th and 90th percentile and mean over --count calls (after 50 unmeasured):
// the mean holds the rare long stalls (a rank descheduled) that the median hides.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <string>
#include <vector>

#include "xgrad/dist/collectives.hpp"

int main(int argc, char** argv) {
    return xgrad::dist::run(argc, argv, [&](xgrad::dist::Context& ctx) {
        int count = 2000;
        if (argc == 3 && std::string(argv[1]) == "--count") count = std::max(1, std::atoi(argv[2]));
        else if (argc != 1) throw xgrad::value_error("usage: dist_latency [--count N]");
        double x = 0;  // stays 0: no overflow over many calls
        std::vector<double> us;
        for (int i = 0; i < count + 50; ++i) {
            const auto start = std::chrono::steady_clock::now();
            xgrad::dist::allreduce_sum(ctx, std::span<double>(&x, 1));
            const auto end = std::chrono::steady_clock::now();
            if (i >= 50) us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
        }
        std::sort(us.begin(), us.end());
        const double mean = std::accumulate(us.begin(), us.end(), 0.0) / double(us.size());
        if (ctx.is_root())
            std::printf("8-byte allreduce over %d ranks: median %.1f us (10%%: %.1f, 90%%: %.1f), mean %.1f us, %d calls\n",
                        ctx.world_size(), us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10], mean, count);
        return 0;
    });
}
