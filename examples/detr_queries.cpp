// A DETR-style encoder-decoder: a feature map (B, C, H, W) is flattened to (HW, B, C) with sine
// positions on its queries and keys; two learned object queries decode it, and every decoder
// layer's output (return_intermediate) is trained, as DETR's auxiliary losses. The task: query q
// reports the content of one fixed pixel, which it can only find by position. Half of the images
// are one column narrower; that padding holds loud noise, which the key padding mask hides.
#include <iostream>

#include <xtensor/xview.hpp>

#include <xgrad/xgrad.hpp>

using namespace xgrad;
constexpr std::size_t B = 16, C = 8, H = 3, W = 4, Q = 2, content = 4;  // channels [0, 4): content; [4, 8): positions
constexpr std::size_t pixel[Q][2] = {{0, 0}, {2, 1}};

struct DetrToy {
    BOOST_HANA_DEFINE_STRUCT(DetrToy, (nn::TransformerEncoder<float>, encoder), (nn::TransformerDecoder<float>, decoder),
                             (Var<float, 3>, query_embed), (nn::Linear<float>, head));
};

int main() {
    Generator gen(0);
    const nn::TransformerLayerOptions lo{.d_model = C, .nhead = 2, .dim_feedforward = 32, .dropout = 0};
    xt::xtensor<float, 3> queries({Q, 1, C});
    for (auto& v : queries) v = float(gen.normal());
    DetrToy model{nn::TransformerEncoder<float>(nn::TransformerEncoderLayer<float>(lo, gen), 1),
                  nn::TransformerDecoder<float>(nn::TransformerDecoderLayer<float>(lo, gen), 2, nn::LayerNorm<float>(C)),
                  parameter(queries), nn::Linear<float>(C, content, gen)};
    optim::Adam<float> opt(model, {.lr = 1e-2});
    const nn::PositionEmbeddingSine<float> sine(2, 10000);
    float first = 0, last = 0;
    for (int step = 0; step <= 300; ++step) {
        xt::xtensor<float, 4> image = xt::zeros<float>({B, C, H, W}), positions = xt::zeros<float>({B, C, H, W});
        xt::xtensor<bool, 3> mask = xt::zeros<bool>({B, H, W});
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t c = 0; c < content; ++c)
                for (std::size_t i = 0; i < H; ++i)
                    for (std::size_t j = 0; j < W; ++j) {
                        mask(b, i, j) = b % 2 == 1 && j == W - 1;
                        image(b, c, i, j) = float(gen.normal()) * (mask(b, i, j) ? 5.f : 1.f);
                    }
        xt::view(positions, xt::all(), xt::range(content, C)) = sine(mask).value();  // (B, 4, H, W)
        xt::xtensor<float, 4> target({2, Q, B, content});  // both decoder layers' outputs
        for (std::size_t q = 0; q < Q; ++q)
            for (std::size_t b = 0; b < B; ++b)
                for (std::size_t c = 0; c < content; ++c)
                    target(0, q, b, c) = target(1, q, b, c) = image(b, c, pixel[q][0], pixel[q][1]);

        const auto src = nn::flatten_feature_map(constant(image));  // (HW, B, C)
        nn::EncoderForwardOptions<float, 3> eo;
        eo.pos = nn::flatten_feature_map(constant(positions));
        eo.src_key_padding_mask = ignore_mask(nn::flatten_mask(mask));
        const auto memory = model.encoder.forward(src, eo);
        nn::DecoderForwardOptions<float, 3> d;
        d.pos = eo.pos, d.memory_key_padding_mask = eo.src_key_padding_mask;
        d.query_pos = expand<3>(model.query_embed, {Q, B, C});
        const auto tgt = constant(xt::xtensor<float, 3>(xt::zeros<float>({Q, B, C})));
        const Var<float, 4> hs = model.decoder.forward_intermediate(tgt, memory, d);  // (2, Q, B, C)
        auto loss = mse_loss(model.head(hs), constant(target));
        opt.zero_grad();
        backward(loss);
        opt.step();
        if (step % 100 == 0) std::cout << "step " << step << "  loss " << loss.value()() << '\n';
        (step == 0 ? first : last) = loss.value()();
        tape().clear();
    }
    return last < first / 20 ? 0 : 1;
}
