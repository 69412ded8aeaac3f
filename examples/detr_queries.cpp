// A DETR-style encoder-decoder (nn::DetrTransformer): a feature map (B, C, H, W) is flattened with
// sine positions on its queries and keys; two learned object queries decode it, and every decoder
// layer's output (return_intermediate) is trained, as DETR's auxiliary losses. The task: query q
// reports the content of one fixed pixel, which it can only find by position. Half of the images
// are one column narrower; that padding holds loud noise, which the mask hides.
#include <iostream>

#include <xtensor/xview.hpp>

#include <xgrad/xgrad.hpp>

using namespace xgrad;
constexpr std::size_t B = 16, C = 8, H = 3, W = 4, content = 4, pixel[2][2] = {{0, 0}, {2, 1}};

struct Detr {
    BOOST_HANA_DEFINE_STRUCT(Detr, (nn::DetrTransformer<float>, transformer), (nn::Linear<float>, head));
};

int main() {
    Generator gen(0);
    Detr model{nn::DetrTransformer<float>({.layer = {.d_model = C, .nhead = 2, .dim_feedforward = 32, .dropout = 0},
                                           .num_encoder_layers = 1, .num_decoder_layers = 2, .num_queries = 2,
                                           .return_intermediate = true}, gen),
               nn::Linear<float>(C, content, gen)};
    optim::Adam<float> opt(model, {.lr = 1e-2});
    constexpr int steps = 600, tail = 100;  // the loss of each step is on a fresh batch: judge the last 100
    float first = 0, last = 0;
    for (int step = 0; step <= steps; ++step) {
        xt::xtensor<float, 4> image({B, C, H, W}), target({2, 2, B, content});  // (layer, query, B, content)
        xt::xtensor<bool, 3> mask = xt::zeros<bool>({B, H, W});
        for (auto& v : image) v = float(gen.normal());
        xt::view(mask, xt::range(1, B, 2), xt::all(), W - 1) = true;                  // odd images: last column
        xt::view(image, xt::range(1, B, 2), xt::all(), xt::all(), W - 1) *= 5.f;  // is loud padding
        for (std::size_t q = 0; q < 2; ++q)  // query q: the content channels of its pixel
            xt::view(target, xt::all(), q) = xt::view(image, xt::all(), xt::range(0, content), pixel[q][0],
                                                      pixel[q][1]);

        const auto out = model.transformer.forward(constant(image), mask);  // hs (2, 2, B, C)
        auto loss = mse_loss(model.head(out.hs), constant(target));
        opt.zero_grad();
        backward(loss);
        opt.step();
        if (step % 100 == 0) std::cout << "step " << step << "  loss " << loss.value()() << '\n';
        if (step == 0) first = loss.value()();
        if (step > steps - tail) last += loss.value()() / tail;
        tape().clear();
    }
    std::cout << "mean loss of the last " << tail << " steps " << last << " (step 0: " << first << ")\n";
    return last < first / 20 ? 0 : 1;
}
