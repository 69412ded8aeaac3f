// The last rank throws while the others wait for it in a broadcast it will never join:
// dist::run must end the whole job with the thrower's one-line message and a nonzero exit status,
// long before mpirun's --timeout (tests/dist/check_abort.sh).
#include <vector>

#include "xgrad/dist/collectives.hpp"

int main(int argc, char** argv) {
    return xgrad::dist::run(argc, argv, [](xgrad::dist::Context& ctx) {
        const int last = ctx.world_size() - 1;
        if (ctx.rank() == last) throw xgrad::value_error("a failure on the last rank only");
        std::vector<float> x(8);
        xgrad::dist::broadcast(ctx, std::span<float>(x), last);
        return 0;
    });
}
