// The Transformer workloads of `xgrad bench --model encoder_layer | transformer`, the same step as
// their libtorch peer (libtorch_transformer.cpp of the shared peers): sequence-first input
// (L, B, E), post-norm layers, relu, dropout p in training mode, the last L/4 source positions
// padded (src_key_padding_mask, and the decoder's memory_key_padding_mask), a decoder of L/2
// positions under a causal tgt_mask, MSE against a fixed random target, backward, Adam(lr 1e-3),
// zero_grad.
//   encoder_layer: one TransformerEncoderLayer(E, H, ffn, p)
//   transformer:   Transformer(E, H, `layers` encoder and `layers` decoder layers, ffn, p)
//   masked_encoder: 3DETR's encoder (no peer): TransformerEncoder of `layers` pre-norm layers and a
//                  final norm, each layer under its own (B, L, L) mask (layer_masks), no padding
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "xgrad/check/random.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::bench {

struct TransformerConfig {
    std::string model = "encoder_layer";  // or "transformer", "masked_encoder"
    std::size_t batch = 8, seq = 64, embed = 256, heads = 8, ffn = 2048, layers = 1;  // B, L, E, H
    double dropout = 0.1;
};

template <Real T>
class TransformerWorkload {
public:
    explicit TransformerWorkload(const TransformerConfig& c, std::uint64_t seed = 0) : init_(seed) {
        const nn::TransformerLayerOptions lo{.d_model = c.embed, .nhead = c.heads, .dim_feedforward = c.ffn,
                                             .dropout = c.dropout};
        const std::size_t L = c.seq, B = c.batch, E = c.embed, tgt_len = std::max<std::size_t>(1, c.seq / 2);
        src_ = constant(xt::xtensor<T, 3>(randn<3>({L, B, E}, seed + 1)));
        xt::xarray<bool> pad = xt::zeros<bool>({B, L});
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t j = L - L / 4; j < L; ++j) pad(b, j) = true;
        if (c.model == "encoder_layer") {
            layer_ = nn::TransformerEncoderLayer<T>(lo, init_);
            adam_.emplace(layer_, optim::AdamOptions{.lr = 1e-3});
            encoder_options_.src_key_padding_mask = ignore_mask(pad);
            target_ = constant(xt::xtensor<T, 3>(randn<3>({L, B, E}, seed + 2)));
        } else if (c.model == "masked_encoder") {
            nn::TransformerLayerOptions pre_norm = lo;
            pre_norm.norm_first = true;
            encoder_ = nn::TransformerEncoder<T>(nn::TransformerEncoderLayer<T>(pre_norm, init_), c.layers,
                                                 nn::LayerNorm<T>(E));
            adam_.emplace(encoder_, optim::AdamOptions{.lr = 1e-3});
            // Layer l, sequence b: query i sees the keys closer than 2 + l + b positions (always itself).
            for (std::size_t l = 0; l < c.layers; ++l) {
                xt::xarray<bool> far = xt::zeros<bool>({B, L, L});
                for (std::size_t b = 0; b < B; ++b)
                    for (std::size_t i = 0; i < L; ++i)
                        for (std::size_t j = 0; j < L; ++j) far(b, i, j) = (i > j ? i - j : j - i) >= 2 + l + b;
                encoder_options_.layer_masks.push_back(ignore_mask(far));
            }
            target_ = constant(xt::xtensor<T, 3>(randn<3>({L, B, E}, seed + 2)));
        } else {
            model_ = nn::Transformer<T>({lo, c.layers, c.layers}, init_);
            adam_.emplace(model_, optim::AdamOptions{.lr = 1e-3});
            options_.src_key_padding_mask = ignore_mask(pad);
            options_.memory_key_padding_mask = ignore_mask(pad);
            options_.tgt_mask = nn::generate_square_subsequent_mask<T>(tgt_len);
            tgt_ = constant(xt::xtensor<T, 3>(randn<3>({tgt_len, B, E}, seed + 4)));
            target_ = constant(xt::xtensor<T, 3>(randn<3>({tgt_len, B, E}, seed + 2)));
        }
    }

    // The loss of this step's forward (before the update). `after_backward` runs between backward
    // and the update (`xgrad bench` under mpirun: the data-parallel gradient reduction).
    T step(const std::function<void()>& after_backward = {}) {
        adam_->zero_grad();
        const Var<T, 3> out = tgt_                 ? model_.forward(src_, tgt_, options_)
                              : encoder_.layers.empty() ? layer_.forward(src_, encoder_options_)
                                                        : encoder_.forward(src_, encoder_options_);
        const auto loss = mse_loss(out, target_);
        backward(loss, {.keep_intermediate_grads = false});
        if (after_backward) after_backward();
        adam_->step();
        const T value = loss.value()();
        tape().clear();
        return value;
    }

    // f(the trained module): the Transformer, the encoder or the encoder layer.
    template <class F>
    decltype(auto) with_module(F&& f) {
        if (tgt_) return f(model_);
        return encoder_.layers.empty() ? f(layer_) : f(encoder_);
    }

private:
    Generator init_;
    nn::TransformerEncoderLayer<T> layer_;  // one of the three
    nn::TransformerEncoder<T> encoder_;
    nn::Transformer<T> model_;
    std::optional<optim::Adam<T>> adam_;
    Var<T, 3> src_, tgt_, target_;
    nn::EncoderForwardOptions<T, 3> encoder_options_;
    nn::TransformerForwardOptions<T> options_;
};

}  // namespace xgrad::bench
