// The Transformer layers, stacks and nn::Transformer against PyTorch 1.13
// (tests/fixtures/make_transformer.py): each case's parameters are loaded by torch's state-dict
// names (io::load_state_dict); output, attention weights and the gradients of every input and
// parameter must agree at rtol 1e-10 in double. The DETR and 3DETR cases are their equations
// written on torch's modules.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "support/fixtures.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/additive_attention.hpp"
#include "xgrad/nn/position_embedding.hpp"
#include "xgrad/nn/transformer.hpp"
#include "xgrad/xgrad.hpp"

namespace test_nn_transformer_parity {

namespace {

using namespace xgrad;
using Arrays = std::map<std::string, io::NpyArray>;

double worst_error = 0;  // largest |ours - torch| / (1 + |torch|)

template <class A>
void check_close(const A& ours, const io::NpyArray& ref, const std::string& what) {
    testing::check_parity(ours, ref.as_xarray<double>(), what, worst_error);
}

struct Case {
    std::string name;
    Arrays a;
    bool has(const std::string& key) const { return a.count(key) != 0; }
    double cfg(const std::string& field, double fallback = 0) const {
        return has("cfg." + field) ? a.at("cfg." + field).as_xarray<double>()() : fallback;
    }
    AnyMask<double> mask(const std::string& key) const {
        if (!has("mask." + key)) return {};
        const auto& m = a.at("mask." + key);
        if (m.dtype == io::Dtype::bool8) return ignore_mask(m.as_xarray<bool>());
        return additive_mask(m.as_xarray<double>());
    }
    template <std::size_t N>
    Var<double, N> input(const std::string& key) const {
        return has("in." + key) ? parameter(a.at("in." + key).as<double, N>()) : Var<double, N>{};
    }
    // The parameters under their torch names, for io::load_state_dict.
    Arrays state_dict() const {
        Arrays sd;
        for (const auto& [k, v] : a)
            if (k.starts_with("param.")) sd[k.substr(6)] = v;
        return sd;
    }
    nn::TransformerLayerOptions layer_options() const {
        nn::TransformerLayerOptions o;
        o.d_model = std::size_t(cfg("d_model")), o.nhead = std::size_t(cfg("nhead"));
        o.dim_feedforward = std::size_t(cfg("dim_feedforward"));
        o.dropout = 0;
        o.activation = cfg("activation") == 1 ? nn::Activation::gelu : nn::Activation::relu;
        o.batch_first = cfg("batch_first") != 0, o.norm_first = cfg("norm_first") != 0;
        o.feed_forward = cfg("feed_forward", 1) != 0;
        return o;
    }
};

Case load_case(const std::string& name) {
    const auto path = std::filesystem::path(XGRAD_FIXTURES) / "transformer" / (name + ".npz");
    return {name, io::read_npz(path)};
}

nn::ActivationFunction<double> activation_of(const Case& c) {
    if (c.cfg("activation") != 2) return {};
    return [](const Var<double, 3>& x) -> Var<double, 3> { return tanh(x); };
}

template <class Layer>
Layer make_layer(const Case& c, Generator& gen) {
    if (auto f = activation_of(c)) return Layer(c.layer_options(), f, gen);
    return Layer(c.layer_options(), gen);
}

// loss = Σ output · up.output + Σ_i attn_weights[i] · up.attn_weights.<i>; backward; every gradient
// compared with torch's.
template <class M, std::size_t N, std::size_t R>
void check_case(const Case& c, M& model, const Var<double, R>& output, const std::vector<Var<double, N>>& weights,
                const std::map<std::string, Var<double, N>>& inputs) {
    check_close(output.value(), c.a.at("out.output"), c.name + " output");
    Var<double, 0> loss = sum(output * constant(c.a.at("up.output").as<double, R>()));
    for (std::size_t i = 0; i < weights.size(); ++i) {
        const std::string key = "attn_weights." + std::to_string(i);
        check_close(weights[i].value(), c.a.at("out." + key), c.name + " " + key);
        loss = loss + sum(weights[i] * constant(c.a.at("up." + key).as<double, N>()));
    }
    CHECK_MESSAGE(c.has("out.attn_weights." + std::to_string(weights.size())) == false, c.name << ": weights missing");
    backward(loss);
    for (const auto& [name, v] : inputs)
        if (v) check_close(v.grad(), c.a.at("grad." + name), c.name + " grad " + name);
    std::size_t compared = 0;
    for_each_parameter(model, [&](const std::string& name, auto& p) {
        check_close(p.grad(), c.a.at("grad." + name), c.name + " grad " + name);
        ++compared;
    });
    CHECK(compared == c.state_dict().size());
    tape().clear();
}

template <std::size_t N>
void run_encoder(const Case& c) {
    Generator gen(1);
    const auto src = c.input<N>("src"), pos = c.input<N>("pos");
    nn::EncoderForwardOptions<double, N> o;
    o.src_mask = c.mask("src_mask"), o.src_key_padding_mask = c.mask("src_key_padding_mask"), o.pos = pos;
    for (int i = 0; c.has("mask.layer_mask." + std::to_string(i)); ++i)
        o.layer_masks.push_back(c.mask("layer_mask." + std::to_string(i)));
    o.need_weights = c.has("out.attn_weights.0");
    const auto layer = make_layer<nn::TransformerEncoderLayer<double>>(c, gen);
    const std::map<std::string, Var<double, N>> inputs{{"src", src}, {"pos", pos}};
    if (c.has("cfg.num_layers")) {
        auto norm = c.cfg("final_norm") != 0 ? std::optional(nn::LayerNorm<double>(layer.options.d_model)) : std::nullopt;
        nn::TransformerEncoder<double> enc(layer, std::size_t(c.cfg("num_layers")), norm);
        io::load_state_dict(enc, c.state_dict(), {}, c.name);
        const auto r = enc.forward_with_weights(src, o);
        check_case(c, enc, r.output, r.attn_weights, inputs);
    } else {
        auto m = layer;
        io::load_state_dict(m, c.state_dict(), {}, c.name);
        check_case(c, m, m.forward(src, o), std::vector<Var<double, N>>{}, inputs);
    }
}

template <std::size_t N>
void run_decoder(const Case& c) {
    Generator gen(2);
    const auto tgt = c.input<N>("tgt"), memory = c.input<N>("memory");
    const auto pos = c.input<N>("pos"), query_pos = c.input<N>("query_pos");
    nn::DecoderForwardOptions<double, N> o;
    o.tgt_mask = c.mask("tgt_mask"), o.memory_mask = c.mask("memory_mask");
    o.tgt_key_padding_mask = c.mask("tgt_key_padding_mask");
    o.memory_key_padding_mask = c.mask("memory_key_padding_mask");
    o.pos = pos, o.query_pos = query_pos, o.need_weights = c.has("out.attn_weights.0");
    const auto layer = make_layer<nn::TransformerDecoderLayer<double>>(c, gen);
    const std::map<std::string, Var<double, N>> inputs{{"tgt", tgt}, {"memory", memory}, {"pos", pos}, {"query_pos", query_pos}};
    if (c.has("cfg.num_layers")) {
        auto norm = c.cfg("final_norm") != 0 ? std::optional(nn::LayerNorm<double>(layer.options.d_model)) : std::nullopt;
        nn::TransformerDecoder<double> dec(layer, std::size_t(c.cfg("num_layers")), norm);
        io::load_state_dict(dec, c.state_dict(), {}, c.name);
        if (c.cfg("return_intermediate") != 0) {
            check_case(c, dec, dec.forward_intermediate(tgt, memory, o), std::vector<Var<double, N>>{}, inputs);
        } else {
            const auto r = dec.forward_with_weights(tgt, memory, o);
            check_case(c, dec, r.output, r.attn_weights, inputs);
        }
    } else {
        auto m = layer;
        io::load_state_dict(m, c.state_dict(), {}, c.name);
        check_case(c, m, m.forward(tgt, memory, o), std::vector<Var<double, N>>{}, inputs);
    }
}

void run_transformer(const Case& c) {
    Generator gen(3);
    nn::TransformerOptions to;
    to.layer = c.layer_options();
    to.num_encoder_layers = std::size_t(c.cfg("num_encoder_layers"));
    to.num_decoder_layers = std::size_t(c.cfg("num_decoder_layers"));
    nn::Transformer<double> model(to, gen);
    io::load_state_dict(model, c.state_dict(), {}, c.name);
    const auto src = c.input<3>("src"), tgt = c.input<3>("tgt");
    nn::TransformerForwardOptions<double> o;
    o.src_mask = c.mask("src_mask"), o.tgt_mask = c.mask("tgt_mask"), o.memory_mask = c.mask("memory_mask");
    o.src_key_padding_mask = c.mask("src_key_padding_mask"), o.tgt_key_padding_mask = c.mask("tgt_key_padding_mask");
    o.memory_key_padding_mask = c.mask("memory_key_padding_mask");
    check_case(c, model, model.forward(src, tgt, o), std::vector<Var<double, 3>>{}, {{"src", src}, {"tgt", tgt}});
}

void run(const std::string& name) {
    const Case c = load_case(name);
    const bool batched = c.cfg("batched", 1) != 0;
    if (c.has("cfg.num_encoder_layers")) return run_transformer(c);
    if (c.has("in.tgt")) return batched ? run_decoder<3>(c) : run_decoder<2>(c);
    batched ? run_encoder<3>(c) : run_encoder<2>(c);
}

}  // namespace

TEST_CASE("Transformer layers match torch.nn.TransformerEncoderLayer / DecoderLayer") {
    for (const char* c : {"encoder_layer_post_relu", "encoder_layer_pre_gelu_bf_bool", "encoder_layer_post_tanh_float3d",
                          "encoder_layer_pre_relu_unbatched", "decoder_layer_post_relu_causal",
                          "decoder_layer_pre_gelu_bf", "decoder_layer_post_gelu_unbatched"}) {
        CAPTURE(c);
        run(c);
    }
}

TEST_CASE("Transformer stacks and nn::Transformer match torch") {
    for (const char* c : {"encoder_post_relu_norm", "encoder_pre_gelu_bf", "decoder_post_relu_norm", "decoder_pre_gelu_bf",
                          "transformer_post", "transformer_pre_bf"}) {
        CAPTURE(c);
        run(c);
    }
}

TEST_CASE("DETR and 3DETR variants match their equations in torch") {
    for (const char* c : {"detr_encoder_layer_post", "detr_encoder_layer_pre_bf", "detr_decoder_layer_post",
                          "detr_decoder_layer_pre_unbatched", "detr_encoder_pre_norm", "detr_decoder_intermediate",
                          "detr3d_encoder", "detr3d_decoder"}) {
        CAPTURE(c);
        run(c);
    }
    MESSAGE("worst relative error against torch over every Transformer case: " << worst_error);
}

TEST_CASE("DETR's PositionEmbeddingSine and feature-map flattening match torch") {
    const Case c = load_case("detr_positions");
    const auto mask = c.a.at("mask.mask").as<bool, 3>();
    check_close(nn::PositionEmbeddingSine<double>(6, 10000, true)(mask).value(), c.a.at("out.pos_normalized"), "pos normalized");
    check_close(nn::PositionEmbeddingSine<double>(4, 20)(mask).value(), c.a.at("out.pos_plain"), "pos plain");
    check_close(nn::PositionEmbeddingSine<double>(2, 100, true, 3.0)(mask).value(), c.a.at("out.pos_scaled"), "pos scale 3");
    CHECK(nn::PositionEmbeddingSine<double>(4, 20)(mask).value().shape() == std::array<std::size_t, 4>{2, 8, 3, 4});
    CHECK(nn::flatten_mask(mask) == c.a.at("out.mask_flat").as<bool, 2>());
    CHECK_THROWS_AS(nn::PositionEmbeddingSine<double>(3, 10000), value_error);
    CHECK_THROWS_AS(nn::PositionEmbeddingSine<double>(4, 10000, false, 1.0), value_error);

    const auto x = parameter(c.a.at("in.feature_map").as<double, 4>());
    const Var<double, 3> flat = nn::flatten_feature_map(x);
    check_close(flat.value(), c.a.at("out.flat"), "flatten_feature_map");
    backward(flat, c.a.at("up.flat").as<double, 3>());
    check_close(x.grad(), c.a.at("grad.feature_map"), "grad feature_map");
    CHECK(nn::unflatten_feature_map(flat, 3, 4).value() == x.value());  // and back
    CHECK_THROWS_AS(nn::unflatten_feature_map(flat, 2, 4), shape_error);
    tape().clear();
}

TEST_CASE("d2l's AdditiveAttention matches torch, with and without valid_lens") {
    for (const char* name : {"additive_attention", "additive_attention_lens", "additive_attention_lens_per_query"}) {
        CAPTURE(name);
        const Case c = load_case(name);
        Generator gen(4);
        nn::AdditiveAttention<double> m(2, 3, 5, 0.0, gen);
        io::load_state_dict(m, c.state_dict(), {}, c.name);
        const auto q = c.input<3>("queries"), k = c.input<3>("keys"), v = c.input<3>("values");
        nn::AdditiveAttentionOutput<double> r;
        if (!c.has("mask.valid_lens")) {
            r = m.forward(q, k, v);
        } else if (c.a.at("mask.valid_lens").shape.size() == 1) {
            r = m.forward(q, k, v, valid_lens(c.a.at("mask.valid_lens").as<std::int64_t, 1>()));
        } else {
            r = m.forward(q, k, v, valid_lens(c.a.at("mask.valid_lens").as<std::int64_t, 2>()));
        }
        check_case(c, m, r.output, std::vector<Var<double, 3>>{r.weights},
                   std::map<std::string, Var<double, 3>>{{"queries", q}, {"keys", k}, {"values", v}});
    }
}

}  // namespace test_nn_transformer_parity
