// A program that never calls set_num_threads runs on one thread, OpenBLAS included: OpenBLAS starts
// with a thread per core, and the first GEMM through xgrad pins it to one (core/parallel.hpp). Its
// own executable: the unit tests call set_num_threads, which would hide a missing pin.
#include <cstdio>

#include <cblas.h>

#include "xgrad/xgrad.hpp"

int main() {
    using namespace xgrad;
    const int openblas_before = openblas_get_num_threads();
    // k = 8192: past xgrad's own kernel (k <= 2048), so the product goes to cblas_sgemm.
    auto a = constant(randn<2>({64, 8192}, 1)), b = constant(randn<2>({8192, 64}, 2));
    const auto c = matmul(a, b);
    const int openblas_after = openblas_get_num_threads();
    std::printf("xgrad threads %zu; OpenBLAS threads %d before the first GEMM, %d after; c(0,0) = %g\n", num_threads(),
                openblas_before, openblas_after, double(c.value()(0, 0)));
    return num_threads() == 1 && openblas_after == 1 ? 0 : 1;
}
