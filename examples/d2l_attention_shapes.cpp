// d2l 11.5's shape example with xgrad's MultiheadAttention: num_hiddens 100, 5 heads, batch 2,
// 4 queries, 6 key-value pairs, valid_lens [3, 2] -> output (2, 4, 100).
#include <iostream>

#include <xgrad/xgrad.hpp>

using namespace xgrad;

int main() {
    Generator gen(0);
    const std::size_t num_hiddens = 100, num_heads = 5, batch = 2, num_queries = 4, num_kvpairs = 6;
    nn::MultiheadAttention<float> attention(
        nn::MultiheadAttentionOptions{.embed_dim = num_hiddens, .num_heads = num_heads, .batch_first = true}, gen);
    set_training(attention, false);  // no dropout

    auto X = constant(xt::xtensor<float, 3>(xt::ones<float>({batch, num_queries, num_hiddens})));
    auto Y = constant(xt::xtensor<float, 3>(xt::ones<float>({batch, num_kvpairs, num_hiddens})));
    nn::MhaForwardOptions<float> options;
    options.valid_lens = valid_lens(xt::xtensor<std::int64_t, 1>{3, 2});  // d2l: keys beyond the valid length are masked

    auto result = attention.forward(X, Y, Y, options);
    std::cout << "output " << shape_str(result.output.shape()) << ", attention weights "
              << shape_str(result.attn_weights.shape()) << '\n';
    // the second sequence attends only to its first 2 keys
    const auto& w = result.attn_weights.value();
    std::cout << "weights of batch 1, query 0: ";
    for (std::size_t s = 0; s < num_kvpairs; ++s) std::cout << w(1, 0, s) << ' ';
    std::cout << '\n';
    const bool ok = result.output.shape() == std::array<std::size_t, 3>{batch, num_queries, num_hiddens} &&
                    w(1, 0, 2) == 0 && w(0, 0, 3) == 0 && std::abs(w(1, 0, 0) + w(1, 0, 1) - 1) < 1e-6;
    return ok ? 0 : 1;
}
