// The construction options of nn::MultiheadAttention (torch.nn.MultiheadAttention's arguments), in a
// header of their own so that a parser of them (the xgrad tool's config of `xgrad attention`)
// needs nothing else.
#pragma once
#include <cstddef>
#include <optional>

namespace xgrad::nn {

struct MultiheadAttentionOptions {
    std::size_t embed_dim = 0, num_heads = 1;
    double dropout = 0;
    bool bias = true, add_bias_kv = false, add_zero_attn = false;
    std::optional<std::size_t> kdim{}, vdim{};  // nullopt = embed_dim
    bool batch_first = false;
};

}  // namespace xgrad::nn
