// nn::DetrTransformer against the same pipeline written out of the layers (the encoder, decoder
// and query_embed it holds), its names, initialization and errors; and the module paths that
// NameScope gives the nodes of a stack (xgrad inspect tells the layers apart). Gradients:
// the "DetrTransformer" gradcheck (checks/transformer.cpp).
#include <algorithm>
#include <set>
#include <string>

#include <doctest/doctest.h>
#include <xtensor/xview.hpp>

#include "xgrad/nn/detr.hpp"
#include "xgrad/xgrad.hpp"

namespace test_nn_detr {

namespace {

using namespace xgrad;

nn::DetrTransformerOptions tiny(bool norm_first) {
    nn::DetrTransformerOptions o;
    o.layer.d_model = 4, o.layer.nhead = 2, o.layer.dim_feedforward = 6, o.layer.dropout = 0;
    o.layer.norm_first = norm_first;
    o.num_encoder_layers = 2, o.num_decoder_layers = 2, o.num_queries = 3, o.return_intermediate = true;
    return o;
}

std::set<std::string> names_of(const nn::DetrTransformer<double>& m) {
    std::set<std::string> names;
    for_each_parameter(m, [&](const std::string& name, const auto&) { names.insert(name); });
    return names;
}

}  // namespace

TEST_CASE("DetrTransformer is DETR's pipeline written out of its encoder, decoder and queries") {
    Generator gen(3);
    const std::size_t B = 2, C = 4, H = 2, W = 3, Q = 3;
    const nn::DetrTransformer<double> detr(tiny(false), gen);
    xt::xtensor<bool, 3> mask = xt::zeros<bool>({B, H, W});
    mask(1, 0, 2) = mask(1, 1, 2) = true;
    const auto features = constant(xt::xtensor<double, 4>(randn<4>({B, C, H, W}, 4)));
    const auto out = detr.forward(features, mask);

    // by hand, as the DETR-style test of transformer.cpp
    nn::EncoderForwardOptions<double, 3> eo;
    eo.pos = nn::flatten_feature_map(nn::PositionEmbeddingSine<double>(C / 2, 10000, true)(mask));
    eo.src_key_padding_mask = ignore_mask(nn::flatten_mask(mask));
    const auto memory = detr.encoder.forward(nn::flatten_feature_map(features), eo);
    nn::DecoderForwardOptions<double, 3> d;
    d.pos = eo.pos, d.memory_key_padding_mask = eo.src_key_padding_mask;
    xt::xtensor<double, 3> query_pos = xt::xtensor<double, 3>::from_shape({Q, B, C});
    for (std::size_t b = 0; b < B; ++b) xt::view(query_pos, xt::all(), b) = detr.query_embed.weight.value();
    d.query_pos = constant(query_pos);
    const auto tgt = constant(xt::xtensor<double, 3>(xt::zeros<double>({Q, B, C})));
    const auto hs = detr.decoder.forward_intermediate(tgt, memory, d);
    CHECK(out.hs.shape() == std::array<std::size_t, 4>{2, Q, B, C});
    CHECK(out.hs.value() == hs.value());
    CHECK(out.memory.value() == nn::unflatten_feature_map(memory, H, W).value());
    CHECK(xt::amax(xt::abs(out.hs.value()))() > 0.1);
    // without return_intermediate: the last layer's output only, (1, Q, B, C)
    auto last_only = detr;
    last_only.options.return_intermediate = false;
    CHECK(last_only.forward(features, mask).hs.value() == xt::view(hs.value(), xt::range(1, 2)));
    tape().clear();
}

TEST_CASE("DetrTransformer: DETR's names, final norms and initialization; bad input") {
    Generator gen(5);
    const nn::DetrTransformer<double> post(tiny(false), gen), pre(tiny(true), gen);
    const auto names = names_of(post);
    for (const char* want : {"encoder.layers.1.self_attn.in_proj_weight", "decoder.layers.0.multihead_attn.out_proj.weight",
                             "decoder.norm.weight", "query_embed.weight"})
        CHECK_MESSAGE(names.count(want) == 1, want);
    CHECK(names.count("encoder.norm.weight") == 0);  // DETR: an encoder norm only with normalize_before
    CHECK(names_of(pre).count("encoder.norm.weight") == 1);
    // xavier_uniform_ on the stacks' matrices: |w| <= sqrt(6 / (fan_in + fan_out)); query_embed is N(0, 1)
    CHECK(xt::amax(xt::abs(post.decoder.layers[0].linear1.weight.value()))() <= std::sqrt(6.0 / (4 + 6)));
    CHECK(post.query_embed.weight.shape() == std::array<std::size_t, 2>{3, 4});

    auto o = tiny(false);
    o.layer.batch_first = true;
    CHECK_THROWS_WITH_AS(nn::DetrTransformer<double>(o, gen), doctest::Contains("sequence-first"), value_error);
    o = tiny(false);
    o.layer.d_model = 8;
    CHECK_NOTHROW(nn::DetrTransformer<double>(o, gen));
    o.layer.d_model = 6;
    CHECK_THROWS_WITH_AS(nn::DetrTransformer<double>(o, gen), doctest::Contains("d_model must be a multiple of 4"),
                         value_error);
    const auto wrong = constant(xt::xtensor<double, 4>(xt::zeros<double>({2, 5, 2, 3})));
    CHECK_THROWS_WITH_AS(post.forward(wrong), doctest::Contains("features (2, 5, 2, 3) and mask (2, 2, 3)"), shape_error);
}

TEST_CASE("the nodes of a stack are labelled with their module path") {
    Generator gen(6);
    const nn::DetrTransformer<double> detr(tiny(false), gen);
    const auto out = detr.forward(constant(xt::xtensor<double, 4>(randn<4>({1, 4, 2, 2}, 7))));
    std::set<std::string> labels;
    const TapeGraph graph(tape());
    for (const auto& e : graph.entries()) labels.insert(e.name);
    for (const char* want : {"encoder.layers.0.self_attn.output", "encoder.layers.1.self_attn.output",
                             "decoder.layers.0.self_attn.context", "decoder.layers.1.multihead_attn.output",
                             "decoder.layers.1.multihead_attn.q"})
        CHECK_MESSAGE(labels.count(want) == 1, want);
    CHECK(labels.count("output") == 0);
    CHECK(NameScope::parts().empty());  // every scope closed
    tape().clear();

    // outside any module, a name is the name alone
    const auto x = named(constant(xt::xtensor<double, 1>{1.0}), "x");
    CHECK(x.node()->label == "x");
}

}  // namespace test_nn_detr
