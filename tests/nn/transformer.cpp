// The Transformer modules by hand: fully masked rows (zeros, not NaN), the mask helpers, clones,
// torch's initialization and names, train/eval, and every bad-input error. Values against torch:
// transformer_parity.cpp.
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/nn/position_embedding.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/xgrad.hpp"

namespace test_nn_transformer {

namespace {

using namespace xgrad;

nn::TransformerLayerOptions tiny(double dropout = 0) {
    nn::TransformerLayerOptions o;
    o.d_model = 4, o.nhead = 2, o.dim_feedforward = 6, o.dropout = dropout;
    return o;
}

template <class A>
bool all_finite(const A& a) {
    for (auto v : a)
        if (!std::isfinite(v)) return false;
    return true;
}

}  // namespace

TEST_CASE("Transformer layers: a fully masked row gives zero attention and finite gradients, not NaN") {
    Generator gen(1);
    for (bool norm_first : {false, true}) {
        CAPTURE(norm_first);
        auto o = tiny();
        o.norm_first = norm_first;
        const nn::TransformerEncoderLayer<double> layer(o, gen);
        const auto src = parameter(xt::xtensor<double, 3>(randn<3>({3, 2, 4}, 5)));
        nn::EncoderForwardOptions<double, 3> fo;
        fo.src_key_padding_mask = ignore_mask(xt::xtensor<bool, 2>{{false, true, true}, {true, true, true}});
        fo.need_weights = true;
        const auto r = layer.forward_with_weights(src, fo);
        CHECK(all_finite(r.output.value()));
        // batch 1 ignores every key: its weights are zero; batch 0 attends to key 0 only
        for (std::size_t i = 0; i < 3; ++i)
            for (std::size_t j = 0; j < 3; ++j) {
                CHECK(r.attn_weights.value()(1, i, j) == 0);
                CHECK(r.attn_weights.value()(0, i, j) == (j == 0 ? 1 : 0));
            }
        backward(sum(r.output * r.output));
        CHECK(all_finite(src.grad()));
        for_each_parameter(layer, [](const std::string& name, auto& p) {
            INFO(name);
            CHECK(all_finite(p.grad()));
        });
        tape().clear();
    }
}

TEST_CASE("generate_square_subsequent_mask") {
    const auto m = nn::generate_square_subsequent_mask<double>(3);
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(m.bias == xt::xarray<double>{{0, -inf, -inf}, {0, 0, -inf}, {0, 0, 0}});
    CHECK(nn::Transformer<float>::generate_square_subsequent_mask(2).bias == xt::xarray<float>{{0, -INFINITY}, {0, 0}});
}

TEST_CASE("a mask per sequence is read by every head: the same as 3DETR's tiling") {
    // 3DETR's tiling, mask.unsqueeze(1).repeat(1, H, 1, 1).view(N·H, L, S): entry n·H + h = mask[n]
    const auto repeat_for_heads = [](const xt::xtensor<bool, 3>& m, std::size_t H) {
        xt::xtensor<bool, 3> out = xt::xtensor<bool, 3>::from_shape({m.shape(0) * H, m.shape(1), m.shape(2)});
        for (std::size_t n = 0; n < m.shape(0); ++n)
            for (std::size_t h = 0; h < H; ++h) xt::view(out, n * H + h) = xt::view(m, n);
        return out;
    };
    Generator gen(5);
    const nn::TransformerEncoderLayer<double> layer(tiny(), gen);  // 2 heads
    const auto src = constant(xt::xtensor<double, 3>{{{0.3, -1.0, 0.5, 0.2}, {1.1, 0.4, -0.7, 0.0}},
                                                     {{-0.2, 0.8, 0.1, -0.9}, {0.6, -0.3, 0.9, 0.4}},
                                                     {{0.5, 0.5, -0.4, 1.2}, {-1.3, 0.2, 0.3, -0.5}}});  // (S 3, N 2, E 4)
    // (N 2, S 3, S 3): sequence 0 attends to earlier keys, sequence 1 to later ones
    const xt::xtensor<bool, 3> ignored{{{false, true, true}, {false, false, true}, {false, false, false}},
                                       {{false, false, false}, {true, false, false}, {true, true, false}}};
    const AnyMask<double> per_sequence = ignore_mask(ignored);
    const auto run = [&](const nn::EncoderForwardOptions<double, 3>& fo) {
        const auto out = layer.forward(src, fo);
        backward(sum(out * out));
        std::vector<xt::xarray<double>> values{out.value(), layer.self_attn.in_proj_weight.grad()};
        layer.self_attn.in_proj_weight.zero_grad();
        tape().clear();
        return values;
    };
    nn::EncoderForwardOptions<double, 3> shared, tiled;
    shared.src_mask = per_sequence, shared.src_mask_per_sequence = true;
    tiled.src_mask = ignore_mask(repeat_for_heads(ignored, 2));
    const auto a = run(shared), b = run(tiled), unmasked = run({});
    CHECK(a[0] == b[0]);
    CHECK(a[1] == b[1]);
    CHECK(xt::amax(xt::abs(a[0] - unmasked[0]))() > 1e-3);  // the mask matters

    shared.src_mask = tiled.src_mask;  // (N·H, S, S) is not one mask per sequence
    CHECK_THROWS_WITH_AS(layer.forward(src, shared), doctest::Contains("(2, 3, 3) (N, L, S): one mask per sequence"),
                         shape_error);
    tape().clear();
}


TEST_CASE("stacks start from independent copies with equal values") {
    Generator gen(2);
    const nn::TransformerEncoderLayer<double> layer(tiny(), gen);
    const nn::TransformerEncoder<double> enc(layer, 2, nn::LayerNorm<double>(4));
    const auto& a = enc.layers[0].self_attn.in_proj_weight;
    const auto& b = enc.layers[1].self_attn.in_proj_weight;
    CHECK(a.value() == b.value());
    CHECK(a.value() == layer.self_attn.in_proj_weight.value());
    CHECK(a.node() != b.node());
    CHECK(a.node() != layer.self_attn.in_proj_weight.node());
    a.node()->value(0, 0) += 1;  // changing one copy leaves the others
    CHECK(b.value()(0, 0) == layer.self_attn.in_proj_weight.value()(0, 0));
}

TEST_CASE("nn::Transformer: torch's state-dict names and initialization") {
    Generator gen(3);
    nn::TransformerOptions to;
    to.layer = tiny();
    to.num_encoder_layers = 2, to.num_decoder_layers = 1;
    const nn::Transformer<double> model(to, gen);
    std::set<std::string> names;
    for_each_parameter(model, [&](const std::string& name, const auto& p) {
        names.insert(name);
        INFO(name);
        if constexpr (std::remove_cvref_t<decltype(p)>::rank == 2) {  // xavier_uniform: |w| <= √(6 / (fan_in + fan_out))
            const double bound = std::sqrt(6.0 / double(p.shape(0) + p.shape(1)));
            CHECK(xt::amax(xt::abs(p.value()))() <= bound);
            CHECK(xt::amax(xt::abs(p.value()))() > 0.5 * bound);
        }
    });
    for (const char* n : {"encoder.layers.0.self_attn.in_proj_weight", "encoder.layers.1.linear1.weight",
                          "encoder.layers.1.norm2.bias", "encoder.norm.weight", "decoder.layers.0.multihead_attn.out_proj.bias",
                          "decoder.layers.0.norm3.weight", "decoder.norm.bias"})
        CHECK_MESSAGE(names.count(n) == 1, n);
    CHECK(names.size() == 2 * 12 + 2 + 1 * 18 + 2);  // torch's nn.Transformer(4, 2, 2, 1, 6): 46 tensors
    CHECK(model.encoder.layers[0].self_attn.in_proj_bias.value() == xt::zeros<double>({12}));
    CHECK(model.decoder.norm->weight.value() == xt::ones<double>({4}));
    // the copies were re-initialized independently
    CHECK(model.encoder.layers[0].linear1.weight.value() != model.encoder.layers[1].linear1.weight.value());
}

TEST_CASE("Transformer layers: dropout in training, none after eval") {
    Generator gen(4);
    nn::TransformerEncoderLayer<double> layer(tiny(0.5), gen);
    const auto src = constant(xt::xtensor<double, 3>(randn<3>({3, 2, 4}, 6)));
    const auto a = layer.forward(src).value(), b = layer.forward(src).value();
    CHECK(a != b);  // two draws
    set_training(layer, false);
    CHECK_FALSE(layer.self_attn.training);
    CHECK_FALSE(layer.dropout2.training);
    CHECK(layer.forward(src).value() == layer.forward(src).value());
    tape().clear();
}

TEST_CASE("Transformer modules: bad input is an error naming the module and the shapes") {
    Generator gen(5);
    auto o = tiny();
    o.nhead = 3;
    CHECK_THROWS_WITH_AS(nn::TransformerEncoderLayer<double>(o, gen), doctest::Contains("not divisible by nhead 3"),
                         value_error);
    o = tiny(1.5);
    CHECK_THROWS_AS(nn::TransformerDecoderLayer<double>(o, gen), value_error);
    o = tiny();
    o.feed_forward = false;
    CHECK_THROWS_AS(nn::TransformerDecoderLayer<double>(o, gen), value_error);

    const nn::TransformerEncoderLayer<double> enc_layer(tiny(), gen);
    const auto wrong = constant(xt::xtensor<double, 3>(xt::zeros<double>({3, 2, 5})));
    CHECK_THROWS_WITH_AS(enc_layer.forward(wrong), doctest::Contains("TransformerEncoderLayer: src has shape (3, 2, 5)"),
                         shape_error);
    const auto src = constant(xt::xtensor<double, 3>(xt::zeros<double>({3, 2, 4})));
    nn::EncoderForwardOptions<double, 3> fo;
    fo.src_key_padding_mask = ignore_mask(xt::xarray<bool>(xt::zeros<bool>({3, 2})));
    CHECK_THROWS_WITH_AS(enc_layer.forward(src, fo), doctest::Contains("key_padding_mask"), shape_error);
    fo = {};
    fo.layer_masks = {AnyMask<double>{}};
    CHECK_THROWS_AS(enc_layer.forward(src, fo), value_error);  // per-layer masks belong to the stack

    const nn::TransformerEncoder<double> enc(enc_layer, 2);
    CHECK_THROWS_WITH_AS(enc.forward(src, fo), doctest::Contains("1 masks for 2 layers"), value_error);
    CHECK_THROWS_AS(nn::TransformerEncoder<double>(enc_layer, 0), value_error);
    CHECK_THROWS_AS(nn::TransformerEncoder<double>{}.forward(src), value_error);

    const nn::TransformerDecoder<double> dec(nn::TransformerDecoderLayer<double>(tiny(), gen), 1);
    CHECK_THROWS_WITH_AS(dec.forward_intermediate(src, src), doctest::Contains("needs the final norm"), value_error);

    nn::TransformerOptions to;
    to.layer = tiny();
    to.layer.batch_first = true;
    to.num_encoder_layers = to.num_decoder_layers = 1;
    const nn::Transformer<double> model(to, gen);
    const auto tgt = constant(xt::xtensor<double, 3>(xt::zeros<double>({2, 1, 4})));  // batch 2, src has 3
    CHECK_THROWS_WITH_AS(model.forward(src, tgt), doctest::Contains("same batch size (axis 0)"), shape_error);
}

TEST_CASE("DETR's positions reach queries and keys only: with one key the attention ignores them") {
    // softmax over a single key is 1 whatever the scores, so pos can change nothing unless it
    // reached the values
    Generator gen(6);
    for (bool norm_first : {false, true}) {
        auto o = tiny();
        o.norm_first = norm_first;
        const nn::TransformerEncoderLayer<double> layer(o, gen);
        const auto src = constant(xt::xtensor<double, 3>(randn<3>({1, 2, 4}, 7)));
        nn::EncoderForwardOptions<double, 3> with_pos;
        with_pos.pos = constant(xt::xtensor<double, 3>(randn<3>({1, 2, 4}, 8)));
        CHECK(xt::allclose(layer.forward(src, with_pos).value(), layer.forward(src).value(), 1e-14, 1e-14));
        const nn::TransformerDecoderLayer<double> dec(o, gen);
        const auto tgt = constant(xt::xtensor<double, 3>(randn<3>({3, 2, 4}, 9)));
        nn::DecoderForwardOptions<double, 3> d;
        d.pos = with_pos.pos;  // memory of one position: pos reaches only the cross-attention keys
        CHECK(xt::allclose(dec.forward(tgt, src, d).value(), dec.forward(tgt, src).value(), 1e-14, 1e-14));
        d.query_pos = constant(xt::xtensor<double, 3>(randn<3>({3, 2, 4}, 10)));  // reaches tgt's queries and keys
        CHECK_FALSE(xt::allclose(dec.forward(tgt, src, d).value(), dec.forward(tgt, src).value()));
        tape().clear();
    }
}

TEST_CASE("a DETR-style pipeline: image positions, flattened features, intermediate decoder outputs") {
    Generator gen(7);
    const std::size_t B = 2, C = 4, H = 2, W = 3, queries = 3;
    xt::xtensor<bool, 3> mask = xt::zeros<bool>({B, H, W});
    mask(1, 0, 2) = mask(1, 1, 2) = true;  // image 1 is one column narrower
    const auto features = parameter(xt::xtensor<double, 4>(randn<4>({B, C, H, W}, 11)));
    const auto src = nn::flatten_feature_map(features);
    const auto pos = nn::flatten_feature_map(nn::PositionEmbeddingSine<double>(C / 2, 10000, true)(mask));
    auto lo = tiny();
    lo.norm_first = true;
    const nn::TransformerEncoder<double> encoder(nn::TransformerEncoderLayer<double>(lo, gen), 2, nn::LayerNorm<double>(C));
    lo.norm_first = false;
    const nn::TransformerDecoder<double> decoder(nn::TransformerDecoderLayer<double>(lo, gen), 2, nn::LayerNorm<double>(C));
    nn::EncoderForwardOptions<double, 3> eo;
    eo.pos = pos, eo.src_key_padding_mask = ignore_mask(nn::flatten_mask(mask));
    const auto memory = encoder.forward(src, eo);
    const auto query_embed = parameter(xt::xtensor<double, 3>(randn<3>({queries, B, C}, 12)));
    nn::DecoderForwardOptions<double, 3> d;
    d.pos = pos, d.query_pos = query_embed, d.memory_key_padding_mask = eo.src_key_padding_mask;
    const auto tgt = constant(xt::xtensor<double, 3>(xt::zeros<double>({queries, B, C})));
    const Var<double, 4> hs = decoder.forward_intermediate(tgt, memory, d);
    CHECK(hs.shape() == std::array<std::size_t, 4>{2, queries, B, C});
    // the last entry is the decoder's output
    CHECK(xt::allclose(xt::view(hs.value(), 1), decoder.forward(tgt, memory, d).value(), 1e-14, 1e-14));
    // 3DETR's decoder: the intermediate stack and every layer's per-head weights from one pass.
    auto both = d;
    both.need_weights = true, both.average_attn_weights = false, both.return_intermediate = true;
    const auto r = decoder.forward_with_weights(tgt, memory, both);
    // (the weights path computes the attention in another order than the fused one: rounding apart)
    CHECK(xt::allclose(r.intermediate.value(), hs.value(), 1e-14, 1e-14));
    CHECK(r.output.value() == xt::view(r.intermediate.value(), 1));
    REQUIRE(r.attn_weights_per_head.size() == 2);
    auto weights_only = both;
    weights_only.return_intermediate = false;
    const auto w = decoder.forward_with_weights(tgt, memory, weights_only);
    CHECK(!w.intermediate);
    for (std::size_t l = 0; l < 2; ++l) CHECK(r.attn_weights_per_head[l].value() == w.attn_weights_per_head[l].value());
    backward(sum(hs * hs));
    CHECK(xt::amax(xt::abs(query_embed.grad()))() > 0);
    CHECK(xt::amax(xt::abs(features.grad()))() > 0);
    CHECK(all_finite(features.grad()));
    tape().clear();
}

}  // namespace test_nn_transformer
