// Gradient checks of the decoders: nn::GPT (nn/gpt.hpp), nanoGPT's loss with respect to every
// parameter (the tied wte/lm_head tensor is one input), with and without biases, both GELU forms, a
// target ignored, and on the memory-efficient attention path; nn::Llama (nn/llama.hpp), model.py's
// loss, grouped-query and multi-query, tied and untied, on three attention paths.
#include <cstdint>

#include "xgrad/check/registry.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::checks {
namespace {

GradcheckResult gpt_check(bool bias, nn::GeluForm gelu, std::size_t layers, std::uint64_t seed,
                          nn::AttentionPath path = nn::AttentionPath::automatic) {
    nn::GPTConfig c;
    c.n_layer = layers, c.n_head = 2, c.n_embd = 4, c.block_size = 4, c.vocab_size = 5, c.bias = bias, c.gelu = gelu;
    Generator gen(seed);
    nn::GPT<double> model(c, gen);
    for_each_parameter(model, [&](const std::string&, auto& p) { init::normal_(p, 0.1, 0.6, gen); });
    const xt::xtensor<std::int64_t, 2> idx{{1, 4, 0, 2}, {3, 3, 1, 0}};
    const xt::xtensor<std::int64_t, 2> targets{{4, -1, 2, 1}, {0, 3, 3, 2}};
    return gradcheck([&](auto& flat) { return nn::gpt_loss(with_flat_parameters(model, flat).forward(idx, {.path = path}).logits, targets); },
                     flatten_parameters(model));
}

// model.py's loss of a Llama with n_heads 4 over kv_heads, tied or not, on `path`.
GradcheckResult llama_check(std::size_t kv_heads, bool tied, std::uint64_t seed,
                            nn::AttentionPath path = nn::AttentionPath::automatic) {
    const nn::LlamaConfig c{.dim = 8, .n_layers = 2, .n_heads = 4, .n_kv_heads = kv_heads, .vocab_size = 5,
                            .hidden_dim = 6, .max_seq_len = 4, .tie_embeddings = tied};
    Generator gen(seed);
    nn::Llama<double> model(c, gen);
    for_each_parameter(model, [&](const std::string&, auto& p) { init::normal_(p, 0.1, 0.6, gen); });
    const xt::xtensor<std::int64_t, 2> idx{{1, 4, 0, 2}, {3, 3, 1, 0}};
    const xt::xtensor<std::int64_t, 2> targets{{4, -1, 2, 1}, {0, 3, 3, 2}};
    return gradcheck([&](auto& flat) { return with_flat_parameters(model, flat).loss(idx, targets, {.path = path}); },
                     flatten_parameters(model));
}

const RegisterGradchecks registered_gpt{"gpt", {
    {"GPT", "loss w.r.t. every parameter: 2 layers, biases, erf GELU, tied lm_head",
     [] { return gpt_check(true, nn::GeluForm::erf, 2, 71); }},
    {"GPT", "loss w.r.t. every parameter: 1 layer, no biases, tanh GELU",
     [] { return gpt_check(false, nn::GeluForm::tanh, 1, 72); }},
    {"GPT", "loss w.r.t. every parameter: 1 layer, the memory-efficient attention (the causal rule)",
     [] { return gpt_check(true, nn::GeluForm::erf, 1, 73, nn::AttentionPath::memory_efficient); }},
    {"Llama", "loss w.r.t. every parameter: 2 layers, 4 heads over 2 kv heads, tied output",
     [] { return llama_check(2, true, 74); }},
    {"Llama", "loss w.r.t. every parameter: multi-query, untied output, the memory-efficient attention",
     [] { return llama_check(1, false, 75, nn::AttentionPath::memory_efficient); }},
    {"Llama", "loss w.r.t. every parameter: 4 kv heads, the plain-op reference attention",
     [] { return llama_check(4, true, 76, nn::AttentionPath::reference); }},
}};

}  // namespace
}  // namespace xgrad::checks
