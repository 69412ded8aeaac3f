// The benchmark's workload (src/workloads/mha.hpp: nn::MultiheadAttention's fused heads-in-place
// path, MSE, Adam) against the same step composed from the library's general ops (linear, slice,
// transpose, split_heads, scaled_dot_product_attention, merge_heads): same losses, step by step.
#include <array>
#include <cstddef>

#include <doctest/doctest.h>

#include "workloads/mha.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_mha_workload {

namespace {

using namespace xgrad;

// The workload's loss through general ops, batch first inside: x (L, B, E) -> (B, L, E).
template <Real T>
Var<T, 0> composed_loss(const nn::MultiheadAttention<T>& m, const Var<T, 3>& x, const Var<T, 3>& target,
                        const xt::xarray<bool>& pad) {
    const long E = long(m.embed_dim());
    const std::size_t H = m.num_heads(), B = x.shape(1), S = x.shape(0);
    const Var<T, 3> qkv = linear(transpose(x, 0, 1), m.in_proj_weight, m.in_proj_bias);  // (B, L, 3E)
    const Var<T, 3> q = split_heads(slice(qkv, 2, 0, E), H), k = split_heads(slice(qkv, 2, E, 2 * E), H),
                    v = split_heads(slice(qkv, 2, 2 * E, 3 * E), H);  // (B·H, L, D)
    xt::xtensor<bool, 3> ignore(std::array<std::size_t, 3>{B * H, 1, S});  // key padding, per head
    for (std::size_t bh = 0; bh < B * H; ++bh)
        for (std::size_t j = 0; j < S; ++j) ignore(bh, 0, j) = pad(bh / H, j);
    const Var<T, 3> context = scaled_dot_product_attention(q, k, v, ignore_mask(ignore));
    const Var<T, 3> out = linear(merge_heads(context, H), m.out_proj.weight, m.out_proj.bias);  // (B, L, E)
    return mse_loss(transpose(out, 0, 1), target);
}

template <Real T>
void check_same_losses(const bench::MhaConfig& c, int steps, double tolerance) {
    bench::MhaWorkload<T> fused(c, 11), composed(c, 11);  // same seed: same parameters, input and target
    optim::Adam<T> adam(composed.module(), {.lr = 1e-3});
    const auto& pad = composed.options().key_padding_mask.bools();  // an ignore_mask
    double first = 0, last = 0;
    for (int step = 0; step < steps; ++step) {
        adam.zero_grad();
        const auto loss = composed_loss(composed.module(), composed.input(), composed.target(), pad);
        backward(loss);
        adam.step();
        const double want = double(loss.value()());
        tape().clear();
        const double got = double(fused.step());
        INFO("step " << step);
        CHECK(got == doctest::Approx(want).epsilon(tolerance));
        (step == 0 ? first : last) = got;
    }
    CHECK(last < first);  // Adam moves the parameters: the check compares more than one point
}

}  // namespace

TEST_CASE("bench workload: the fused MHA training step equals the composed general ops (double)") {
    check_same_losses<double>({.batch = 3, .seq = 8, .embed = 12, .heads = 3}, 4, 1e-12);
    check_same_losses<double>({.batch = 2, .seq = 6, .embed = 100, .heads = 5}, 3, 1e-12);  // tiny
}

TEST_CASE("bench workload: float32 step equals the composed path to float precision") {
    check_same_losses<float>({.batch = 8, .seq = 32, .embed = 64, .heads = 4}, 3, 1e-5);  // small
}

TEST_CASE("bench workload: useful FLOPs of the tiny configuration") {
    // in-projection 6·12·100² = 720000 and out-projection 2·12·100² = 240000 forward, attention
    // 4·2·36·100 = 28800; backward: in-projection weight 720000, out-projection 480000, attention 57600.
    CHECK(bench::useful_flops({.batch = 2, .seq = 6, .embed = 100, .heads = 5}) ==
          doctest::Approx(720000.0 + 240000 + 28800 + 720000 + 480000 + 57600));
}

}  // namespace test_cli_mha_workload
