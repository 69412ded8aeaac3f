// Loading part of a bigger checkpoint (issue "Modules for deep models"): strict by default, a
// non-strict mode that reports missing and unexpected names, a prefix for a sub-tree (DETR's
// `transformer.` beside its `backbone.`), float from float64 and back.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "xgrad/io/state_dict.hpp"
#include "xgrad/xgrad.hpp"

namespace test_nn_state_dict_loading {

using namespace xgrad;

namespace {

template <Real T>
struct Encoder {
    BOOST_HANA_DEFINE_STRUCT(Encoder, (nn::Linear<T>, proj), (nn::LayerNorm<T>, norm));
    explicit Encoder(Generator& gen) : proj(3, 2, gen), norm(2) {}
};

// A "DETR" checkpoint: a backbone the model does not have, and the transformer under a prefix.
std::map<std::string, io::NpyArray> detr_checkpoint() {
    std::map<std::string, io::NpyArray> sd;
    sd.emplace("backbone.conv.weight", io::NpyArray::from(xt::xtensor<double, 2>{{1, 2}}));
    sd.emplace("transformer.proj.weight", io::NpyArray::from(xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}}));
    sd.emplace("transformer.proj.bias", io::NpyArray::from(xt::xtensor<double, 1>{0.5, -0.5}));
    sd.emplace("transformer.norm.weight", io::NpyArray::from(xt::xtensor<double, 1>{2, 3}));
    sd.emplace("transformer.norm.bias", io::NpyArray::from(xt::xtensor<double, 1>{0.25, 0.75}));
    sd.emplace("class_embed.weight", io::NpyArray::from(xt::xtensor<double, 2>{{1}}));
    return sd;
}

}  // namespace

TEST_CASE("trap: loading a sub-tree of a bigger checkpoint: a prefix, strict by default") {
    Generator gen(1);
    Encoder<double> enc(gen);
    const auto sd = detr_checkpoint();
    // strict, no prefix: every problem listed at once
    CHECK_THROWS_WITH_AS(io::load_state_dict(enc, sd),
                         doctest::Contains("missing keys: proj.weight, proj.bias, norm.weight, norm.bias; unexpected keys: "
                                           "backbone.conv.weight, class_embed.weight, transformer.norm.bias"),
                         io_error);
    // the transformer sub-tree: exact, strict
    const auto r = io::load_state_dict(enc, sd, {.prefix = "transformer."});
    CHECK(r.missing_keys.empty());
    CHECK(r.unexpected_keys.empty());
    CHECK(enc.proj.weight.value() == xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}});
    CHECK(enc.norm.bias.value() == xt::xtensor<double, 1>{0.25, 0.75});
}

TEST_CASE("rename: a file whose names are not the module's (a port keeps its own), under a prefix") {
    Generator gen(1);
    Encoder<double> m(gen);
    // The port's names: "transformer.fc.*" and "transformer.ln.gamma/beta"; the backbone is skipped.
    std::map<std::string, io::NpyArray> file;
    for (auto& [key, a] : detr_checkpoint()) {
        std::string k = key;
        if (k.starts_with("transformer.proj.")) k = "transformer.fc." + k.substr(17);
        if (k == "transformer.norm.weight") k = "transformer.ln.gamma";
        if (k == "transformer.norm.bias") k = "transformer.ln.beta";
        file.emplace(k, a);
    }
    const std::map<std::string, std::string> names = {
        {"fc.weight", "proj.weight"}, {"fc.bias", "proj.bias"}, {"ln.gamma", "norm.weight"}, {"ln.beta", "norm.bias"}};
    const auto rename = [&](const std::string& key) {
        const auto it = names.find(key);
        return it == names.end() ? std::string() : it->second;  // "" skips the key
    };
    const auto r = io::load_state_dict(m, file, {.prefix = "transformer.", .rename = rename});
    CHECK(r.missing_keys.empty());
    CHECK(r.unexpected_keys.empty());
    CHECK(m.proj.weight.value() == xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}});
    CHECK(m.norm.weight.value() == xt::xtensor<double, 1>{2, 3});
    CHECK(m.norm.bias.value() == xt::xtensor<double, 1>{0.25, 0.75});
    // Two keys renamed to one name: an error naming both, the model unchanged.
    m.norm.bias.value().fill(0.0);
    const auto collide = [](const std::string& key) { return key.starts_with("ln.") ? std::string("norm.bias") : key; };
    CHECK_THROWS_WITH_AS(io::load_state_dict(m, file, {.strict = false, .prefix = "transformer.", .rename = collide}),
                         "state dict: cannot load the state dict: rename gives transformer.ln.beta and "
                         "transformer.ln.gamma one name, norm.bias",
                         io_error);
    CHECK(m.norm.bias.value() == xt::xtensor<double, 1>{0, 0});
}

TEST_CASE("non-strict loading returns the missing and unexpected names and loads the rest") {
    Generator gen(2);
    Encoder<double> enc(gen);
    const auto norm_before = enc.norm.weight.value();
    auto sd = io::state_dict(Encoder<double>(gen));
    sd.erase("norm.weight");
    sd.emplace("extra.scale", io::NpyArray::from(xt::xtensor<double, 1>{1}));
    const auto proj = sd.at("proj.weight").as<double, 2>();
    const auto r = io::load_state_dict(enc, sd, {.strict = false});
    CHECK(r.missing_keys == std::vector<std::string>{"norm.weight"});
    CHECK(r.unexpected_keys == std::vector<std::string>{"extra.scale"});
    CHECK(enc.proj.weight.value() == proj);
    CHECK(enc.norm.weight.value() == norm_before);  // missing: kept
    // a shape mismatch is an error in every mode, and nothing is loaded
    sd.at("proj.bias") = io::NpyArray::from(xt::xtensor<double, 1>{1, 2, 3});
    CHECK_THROWS_WITH_AS(io::load_state_dict(enc, sd, {.strict = false}),
                         "state dict: cannot load the state dict: proj.bias has shape (3,), the model expects (2,)",
                         io_error);
}

TEST_CASE("loading into float from a float64 file and back, under a prefix") {
    Generator gen(3);
    Encoder<float> small(gen);
    const auto sd = detr_checkpoint();
    CHECK_THROWS_WITH_AS(io::load_state_dict(small, sd, {.prefix = "transformer."}),
                         doctest::Contains("proj.weight has dtype float64, the model expects float32 (set convert_dtype"),
                         io_error);
    io::load_state_dict(small, sd, {.convert_dtype = true, .prefix = "transformer."});
    CHECK(small.proj.bias.value() == xt::xtensor<float, 1>{0.5f, -0.5f});
    Encoder<double> wide(gen);
    io::load_state_dict(wide, io::state_dict(small), {.convert_dtype = true});
    CHECK(wide.proj.weight.value() == xt::xtensor<double, 2>{{1, 2, 3}, {4, 5, 6}});
}

}  // namespace test_nn_state_dict_loading
