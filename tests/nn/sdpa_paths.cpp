// scaled_dot_product_attention runs the paths of MultiheadAttention (nn/attention/paths.hpp): its
// output, weights and every gradient equal those of the plain-op reference (reference.hpp), for
// each rank, mask kind, dropout and the long causal case the memory-efficient path takes.
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

namespace test_nn_sdpa_paths {

using namespace xgrad;

namespace {

template <std::size_t N>
struct Grads {
    xt::xtensor<double, N> output, weights, dq, dk, dv;
};

// loss = Σ output ⊙ c + Σ weights ⊙ c' (when asked): the gradients through both, with dropout p.
template <std::size_t N, class Attend>
Grads<N> run(const Attend& attend, const xt::xtensor<double, N>& q0, const xt::xtensor<double, N>& k0,
             const xt::xtensor<double, N>& v0, bool with_weights) {
    auto q = parameter(q0), k = parameter(k0), v = parameter(v0);
    const SdpaResult<double, N> r = attend(q, k, v);
    Var<double, 0> loss = sum(r.output * constant(xt::xtensor<double, N>(xt::cos(r.output.value() * 3.0))));
    if (with_weights) loss = loss + sum(r.weights * constant(xt::xtensor<double, N>(xt::sin(r.weights.value() * 5.0))));
    backward(loss);
    Grads<N> g{r.output.value(), with_weights ? xt::xtensor<double, N>(r.weights.value()) : xt::xtensor<double, N>{},
               q.grad(), k.grad(), v.grad()};
    tape().clear();
    return g;
}

template <std::size_t N>
void check_same(const Grads<N>& got, const Grads<N>& want, double tol) {
    CHECK(xt::allclose(got.output, want.output, 0, tol));
    CHECK(xt::allclose(got.weights, want.weights, 0, tol));
    CHECK(xt::allclose(got.dq, want.dq, 0, tol));
    CHECK(xt::allclose(got.dk, want.dk, 0, tol));
    CHECK(xt::allclose(got.dv, want.dv, 0, tol));
    CHECK(xt::amax(xt::abs(got.dq))() > 1e-3);  // the loss reaches q: the comparison is not of zeros
}

// sdpa(..., masks) against the reference of the same masks, with and without its weights.
template <std::size_t N, class... Masks>
void check_against_reference(const std::array<std::size_t, N>& qs, std::size_t S, double p, const Masks&... masks) {
    std::array<std::size_t, N> ks = qs;
    ks[N - 2] = S;
    const auto q0 = randn<N>(qs, 1), k0 = randn<N>(ks, 2), v0 = randn<N>(ks, 3);
    std::array<std::size_t, N> scores = qs;
    scores[N - 1] = S;
    const double scale = 1 / std::sqrt(double(qs[N - 1]));
    for (bool with_weights : {false, true}) {
        Generator g1(7), g2(7);
        const auto reference = run<N>([&](auto& q, auto& k, auto& v) {
            return detail::reference_attention(q, k, v, scale, detail::merged_masks<double>(scores, "test", masks...), p,
                                               &g1);
        }, q0, k0, v0, with_weights);
        const auto paths = run<N>([&](auto& q, auto& k, auto& v) {
            return detail::sdpa<true>(q, k, v, p, std::nullopt, &g2, false, "test", masks...);
        }, q0, k0, v0, with_weights);
        check_same(paths, reference, 1e-12);
    }
}

}  // namespace

TEST_CASE("scaled_dot_product_attention: the reference's results on every rank and mask kind") {
    check_against_reference<4>({2, 3, 5, 4}, 6, 0.0);
    check_against_reference<4>({2, 3, 5, 4}, 6, 0.0, causal);
    check_against_reference<3>({3, 7, 8}, 7, 0.0, keep_mask(xt::xtensor<bool, 1>{true, true, false, true, true, false, true}));
    check_against_reference<3>({3, 7, 8}, 5, 0.0, additive_mask(randn<2>({7, 5}, 9)), causal);
    check_against_reference<2>({4, 8}, 9, 0.0, ignore_mask(xt::xtensor<bool, 2>(xt::equal(xt::arange(36).reshape({4, 9}) % 3, 0))));
    check_against_reference<3>({2, 4, 8}, 6, 0.0, valid_lens(xt::xtensor<std::int64_t, 1>{2, 6}));
}

TEST_CASE("scaled_dot_product_attention: dropout draws the reference's masks") {
    check_against_reference<4>({1, 2, 6, 4}, 6, 0.3);
}

TEST_CASE("scaled_dot_product_attention: a long causal attention (the memory-efficient path) and Ev != E") {
    check_against_reference<3>({1, 520, 8}, 520, 0.0, causal);
    auto q = parameter(randn<2>({5, 4}, 1)), k = parameter(randn<2>({6, 4}, 2)), v = parameter(randn<2>({6, 3}, 3));
    const auto r = scaled_dot_product_attention_with_weights(q, k, v);
    const auto ref = detail::reference_attention(q, k, v, 0.5, detail::merged_masks<double>(std::array<std::size_t, 2>{5, 6}, "t"),
                                                 0.0, nullptr);
    CHECK(r.output.shape() == std::array<std::size_t, 2>{5, 3});
    CHECK(xt::allclose(r.output.value(), ref.output.value(), 0, 1e-14));
}

}  // namespace test_nn_sdpa_paths
