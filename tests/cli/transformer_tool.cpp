// `xgrad transformer` (cli::run_transformer, the command's body): each torch fixture of
// tests/fixtures/transformer/ that the command can express is written out as an IN folder
// (config.json, <state-dict name>.npy, inputs, masks, grad_output.npy); OUT must hold torch's
// output and every gradient at rtol 1e-10. Bad input: an io_error naming the file or field, and
// nothing written to OUT.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>

#include "io/io_test_util.hpp"
#include "study/explore.hpp"
#include "study/inspect.hpp"
#include "study/transformer.hpp"
#include "support/fixtures.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/io/npz.hpp"

namespace test_cli_transformer_tool {

using namespace xgrad;
using xgrad::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

std::map<std::string, io::NpyArray> fixture(const std::string& name) {
    return io::read_npz(fs::path(XGRAD_FIXTURES) / "transformer" / (name + ".npz"));
}

double cfg(const std::map<std::string, io::NpyArray>& a, const std::string& f, double fallback = 0) {
    return a.count("cfg." + f) ? a.at("cfg." + f).as_xarray<double>()() : fallback;
}

// Writes the fixture as the command's IN folder; returns the config text.
std::string write_in(const std::string& name, const fs::path& in, const std::string& module) {
    const auto a = fixture(name);
    const auto flag = [&](const std::string& f) { return cfg(a, f) != 0 ? "true" : "false"; };
    std::string json = "{\"module\": \"" + module + "\", \"d_model\": " + std::to_string(int(cfg(a, "d_model"))) +
                       ", \"nhead\": " + std::to_string(int(cfg(a, "nhead"))) +
                       ", \"dim_feedforward\": " + std::to_string(int(cfg(a, "dim_feedforward"))) +
                       ", \"activation\": \"" + (cfg(a, "activation") == 1 ? "gelu" : "relu") +
                       "\", \"layer_norm_eps\": 1e-5, \"batch_first\": " + flag("batch_first") +
                       ", \"norm_first\": " + flag("norm_first");
    if (module == "encoder" || module == "decoder")
        json += ", \"num_layers\": " + std::to_string(int(cfg(a, "num_layers"))) + ", \"final_norm\": " + flag("final_norm");
    if (module == "transformer")
        json += ", \"num_encoder_layers\": " + std::to_string(int(cfg(a, "num_encoder_layers"))) +
                ", \"num_decoder_layers\": " + std::to_string(int(cfg(a, "num_decoder_layers")));
    if (a.count("in.pos")) json += ", \"pos_embed\": true";
    if (cfg(a, "return_intermediate") != 0) json += ", \"return_intermediate\": true";
    json += "}";
    xgrad::testing::write_bytes(in / "config.json", json);
    for (const auto& [key, v] : a) {
        const auto dot = key.find('.');
        const std::string kind = key.substr(0, dot), rest = key.substr(dot + 1);
        if (kind == "param" || kind == "in" || kind == "mask") io::write_npy(in / (rest + ".npy"), v);
        if (key == "up.output") io::write_npy(in / "grad_output.npy", v);
    }
    return json;
}

}  // namespace

TEST_CASE("xgrad transformer: torch's outputs and gradients for every module kind") {
    const std::pair<const char*, const char*> cases[] = {
        {"encoder_layer_post_relu", "encoder_layer"},          {"encoder_layer_pre_gelu_bf_bool", "encoder_layer"},
        {"encoder_layer_pre_relu_unbatched", "encoder_layer"}, {"decoder_layer_post_relu_causal", "decoder_layer"},
        {"decoder_layer_post_gelu_unbatched", "decoder_layer"}, {"encoder_post_relu_norm", "encoder"},
        {"decoder_pre_gelu_bf", "decoder"},                    {"transformer_post", "transformer"},
        {"transformer_pre_bf", "transformer"},                 {"detr_encoder_layer_post", "encoder_layer"},
        {"detr_decoder_layer_pre_unbatched", "decoder_layer"}, {"detr_decoder_intermediate", "decoder"}};
    double worst = 0;
    for (const auto& [name, module] : cases) {
        CAPTURE(name);
        ScratchDir dir;
        const fs::path in = dir.path / "in", out = dir.path / "out";
        fs::create_directories(in);
        write_in(name, in, module);
        cli::run_transformer(in, out);
        const auto a = fixture(name);
        xgrad::testing::check_parity(io::read_npy(out / "output.npy").as_xarray<double>(), a.at("out.output").as_xarray<double>(),
                     "output", worst);
        std::size_t grads = 0;
        for (const auto& [key, v] : a) {
            if (!key.starts_with("grad.")) continue;
            ++grads;
            REQUIRE_MESSAGE(fs::exists(out / (key + ".npy")), key);
            xgrad::testing::check_parity(io::read_npy(out / (key + ".npy")).as_xarray<double>(), v.as_xarray<double>(), key, worst);
        }
        CHECK(ScratchDir::entries_of(out).size() == grads + 1);  // output.npy and nothing else
    }
    MESSAGE("xgrad transformer: worst relative error against torch " << worst);
}

TEST_CASE("xgrad inspect lists the tape of a Transformer folder") {
    ScratchDir dir;
    const fs::path in = dir.path / "in";
    fs::create_directories(in);
    write_in("detr_decoder_layer_post", in, "decoder_layer");
    std::ostringstream listing;
    cli::run_inspect(in, listing, {.dot = std::nullopt, .dump = dir.path / "dump"});
    const std::string text = listing.str();
    CAPTURE(text);
    for (const char* want : {"decoder_layer d_model=4 nhead=2, tgt (2, 2, 4) float64", "query_pos", "memory",
                             "self_attn.in_proj_weight", "multihead_attn.out_proj.weight", "norm3.bias", "weights",
                             "self_attn.output", "multihead_attn.output"})
        CHECK_MESSAGE(text.find(want) != std::string::npos, want);
    // the dump holds the inputs with their gradients, as `xgrad transformer` writes them
    const auto a = fixture("detr_decoder_layer_post");
    double worst = 0;
    xgrad::testing::check_parity(io::read_npy(dir.path / "dump" / "query_pos.grad.npy").as_xarray<double>(),
                                 a.at("grad.query_pos").as_xarray<double>(), "query_pos.grad", worst);
}

TEST_CASE("xgrad explore on Transformer folders: every attention with its inputs, torch's input gradients") {
    const std::pair<const char*, const char*> cases[] = {{"transformer_post", "transformer"},
                                                         {"decoder_layer_post_relu_causal", "decoder_layer"}};
    for (const auto& [name, module] : cases) {
        CAPTURE(name);
        ScratchDir dir;
        const fs::path in = dir.path / "in";
        fs::create_directories(in);
        write_in(name, in, module);
        cli::ExploreOptions o;
        o.source = in, o.positions = 1000;
        const cli::ExploreData d = cli::explore(o);
        const auto a = fixture(name);
        const bool full = std::string(module) == "transformer";
        // inputs: src (or memory), then tgt; the losses are tgt's positions
        REQUIRE(d.inputs.size() == 2);
        CHECK(d.inputs[0].name == (full ? "src" : "memory"));
        CHECK(d.loss_input == 1);
        const std::size_t encoder = full ? std::size_t(cfg(a, "num_encoder_layers")) : 0;
        const std::size_t decoder = full ? std::size_t(cfg(a, "num_decoder_layers")) : 1;
        REQUIRE(d.sites.size() == encoder + 2 * decoder);
        for (const auto& s : d.sites) {
            CAPTURE(s.name);
            const bool cross = s.name.find("multihead_attn") != std::string::npos;
            const bool encodes = s.name.find("encoder") != std::string::npos;
            CHECK(s.query_input == (encodes ? 0 : 1));
            CHECK(s.key_input == (encodes || cross ? 0 : 1));
        }
        // the whole loss's saliency is ‖torch's input gradient‖ per token of sequence 0
        for (std::size_t k = 0; k < 2; ++k) {
            const auto g = a.at("grad." + d.inputs[k].name).as_xarray<double>();  // (L, B, E), sequence first
            REQUIRE(g.dimension() == 3);
            for (std::size_t t = 0; t < g.shape(0); ++t) {
                double norm = 0;
                for (std::size_t e = 0; e < g.shape(2); ++e) norm += g(t, 0, e) * g(t, 0, e);
                CHECK(d.choices[0].saliency[k][t] == doctest::Approx(std::sqrt(norm)).epsilon(1e-10));
            }
        }
        // L = Σ_t L_t over the target positions of sequence 0 (the other sequence's rows are not its)
        for (std::size_t k = 0; k < d.sites.size(); ++k) {
            const auto& whole = d.choices[0].sites[k].dscores;
            double gap = 0;
            for (std::size_t e = 0; e < whole.size(); ++e) {
                double sum = 0;
                for (std::size_t c = 1; c < d.choices.size(); ++c) sum += d.choices[c].sites[k].dscores[e];
                gap = std::max(gap, std::abs(whole[e] - sum));
            }
            CHECK(gap < 1e-12);
        }
    }
}

TEST_CASE("xgrad transformer: bad input is one io_error naming the file or field; nothing is written") {
    ScratchDir dir;
    const fs::path in = dir.path / "in", out = dir.path / "out";
    fs::create_directories(in);
    const std::string json = write_in("decoder_layer_post_relu_causal", in, "decoder_layer");
    auto expect = [&](const std::string& what) {
        CHECK_THROWS_WITH_AS(cli::run_transformer(in, out), doctest::Contains(what.c_str()), io_error);
        CHECK_FALSE(fs::exists(out));
    };
    auto config = [&](const std::string& from, const std::string& to) {
        std::string j = json;
        j.replace(j.find(from), from.size(), to);
        xgrad::testing::write_bytes(in / "config.json", j);
    };
    config("\"nhead\": 2", "\"nhead\": 3");
    expect("field \"d_model\" (4) must be divisible by nhead (3)");
    config("\"activation\": \"relu\"", "\"activation\": \"tanh\"");
    expect("field \"activation\" must be \"relu\" or \"gelu\"");
    config("\"module\": \"decoder_layer\"", "\"module\": \"decoder_stack\"");
    expect("field \"module\" must be");
    config("\"norm_first\": false", "\"norm_first\": false, \"num_layers\": 2");
    expect("unknown field \"num_layers\" for module decoder_layer");
    config("\"norm_first\": false", "\"norm_first\": 0");
    expect("field \"norm_first\" must be true or false");
    xgrad::testing::write_bytes(in / "config.json", json);

    const auto tgt_mask = io::read_npy(in / "tgt_mask.npy");
    io::write_npy(in / "tgt_mask.npy", io::NpyArray::from(xt::xtensor<double, 2>(xt::zeros<double>({3, 3}))));
    expect("tgt_mask.npy: has shape (3, 3), expected (2, 2) or (4, 2, 2)");
    io::write_npy(in / "tgt_mask.npy", tgt_mask);
    io::write_npy(in / "src_mask.npy", tgt_mask);
    expect("src_mask.npy: not an input of decoder_layer");
    fs::remove(in / "src_mask.npy");
    const auto grad = io::read_npy(in / "grad_output.npy");
    io::write_npy(in / "grad_output.npy", io::NpyArray::from(xt::xtensor<double, 2>(xt::zeros<double>({2, 4}))));
    expect("grad_output.npy: has shape (2, 4), expected (2, 2, 4)");
    io::write_npy(in / "grad_output.npy", grad);
    fs::remove(in / "linear2.bias.npy");
    expect("linear2.bias.npy");
    io::write_npy(in / "linear2.bias.npy", io::NpyArray::from(xt::xtensor<float, 1>(xt::zeros<float>({4}))));
    expect("linear2.bias.npy: has dtype float32");
    fs::remove(in / "memory.npy");
    expect("memory.npy");
}

}  // namespace test_cli_transformer_tool
