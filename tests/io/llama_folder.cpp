// A Llama in Hugging Face's folder layout (xgrad/io/llama_folder.hpp) against llama2.c's model.py
// on the same weights: tests/fixtures/llama_folder (config.json, model.safetensors with q_proj and
// k_proj in Hugging Face's rotary row order, tokenizer.model; expected.npz: model.py's logits and
// greedy tokens), written by make_llama_folder.py. Then written back, tied, sharded, and broken.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "io_test_util.hpp"
#include "xgrad/io/llama_folder.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/nn/generate.hpp"

namespace test_io_llama_folder {

using namespace xgrad;
using xgrad::testing::read_bytes;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

const fs::path fixture = fs::path(XGRAD_FIXTURES) / "llama_folder";

// max |logits − model.py's| / max |model.py's| on expected.npz's idx
double logit_error(const nn::Llama<float>& model) {
    const auto expected = io::read_npz(fixture / "expected.npz");
    const auto idx = expected.at("idx").as<std::int64_t, 2>();
    const auto want = expected.at("logits").as<float, 3>();
    const NoGrad no_grad;
    const auto got = model(idx).value();
    REQUIRE(got.shape() == want.shape());
    return double(xt::amax(xt::abs(got - want))()) / double(xt::amax(xt::abs(want))());
}

void copy_fixture(const fs::path& dir) {
    for (const char* f : {"config.json", "model.safetensors", "tokenizer.model"})
        fs::copy_file(fixture / f, dir / f, fs::copy_options::overwrite_existing);
}

}  // namespace

TEST_CASE("a Llama folder in Hugging Face's layout gives model.py's logits and greedy tokens") {
    const auto folder = io::open_llama_folder<float>(fixture);
    const nn::LlamaConfig& c = folder.model.config;
    CHECK(c.dim == 32);
    CHECK(c.kv_heads() == 2);
    CHECK(c.ffn_hidden() == 48);
    CHECK(!c.tie_embeddings);
    CHECK(folder.tokenizer.kind() == text::Tokenizer::Kind::sentencepiece);
    const double error = logit_error(folder.model);
    MESSAGE("max |logits - model.py's| / max |model.py's| = " << error);
    // float32 both ways, its sums in another order (2.5e-6 seen in the sanitized build on an AVX-512 Xeon);
    // a misread tensor is off by O(1)
    CHECK(error < 1e-5);
    const auto expected = io::read_npz(fixture / "expected.npz");
    const auto prompt = expected.at("prompt").as<std::int64_t, 1>();
    xt::xtensor<std::int64_t, 2> start = xt::xtensor<std::int64_t, 2>::from_shape({1, prompt.size()});
    std::copy(prompt.begin(), prompt.end(), start.begin());
    Generator gen(0);
    const auto ids = nn::generate(folder.model, start, 12, gen, {.temperature = 0});
    const auto greedy = expected.at("greedy").as<std::int64_t, 1>();
    CHECK(xt::view(ids, 0, xt::range(prompt.size(), prompt.size() + 12)) == greedy);
    // the rows of q and k are Meta's again: a rotary permutation left in place would change the logits
    const auto hf = io::SafetensorsFile::open(fixture / "model.safetensors").array("model.layers.0.self_attn.q_proj.weight");
    CHECK(hf.as<float, 2>() != folder.model.layers[0].attention.wq.weight.value());
}

TEST_CASE("a Llama folder written by save_llama_folder reads back: untied, tied, sharded") {
    const auto folder = io::open_llama_folder<float>(fixture);
    const ScratchDir dir;
    io::save_llama_folder(folder.model, folder.tokenizer, dir.path);
    // the same tensors as the fixture's, Hugging Face's row order included
    const auto theirs = io::SafetensorsFile::open(fixture / "model.safetensors");
    const auto mine = io::SafetensorsFile::open(dir.path / "model.safetensors");
    REQUIRE(mine.tensors().size() == theirs.tensors().size());
    for (const auto& [name, t] : theirs.tensors()) CHECK(mine.array(name).bytes == theirs.array(name).bytes);
    CHECK(read_bytes(dir.path / "tokenizer.model") == read_bytes(fixture / "tokenizer.model"));
    const auto again = io::open_llama_folder<float>(dir.path);
    CHECK(logit_error(again.model) == logit_error(folder.model));

    // tied: no lm_head in the file, the output is the embedding
    Generator gen(3);
    nn::LlamaConfig tied_config = folder.model.config;
    tied_config.tie_embeddings = true;
    const nn::Llama<double> tied(tied_config, gen);
    const ScratchDir tied_dir;
    io::save_llama_folder(tied, folder.tokenizer, tied_dir.path);
    CHECK(!io::SafetensorsFile::open(tied_dir.path / "model.safetensors").tensors().count("lm_head.weight"));
    const auto tied_again = io::open_llama_folder<double>(tied_dir.path);
    CHECK(tied_again.model.output.weight.node() == tied_again.model.tok_embeddings.weight.node());
    const xt::xtensor<std::int64_t, 2> idx{{1, 5, 9, 2}};
    CHECK(tied_again.model(idx).value() == tied(idx).value());

    // a character vocabulary: xgrad_tokenizer.json in place of tokenizer.model
    const ScratchDir chars_dir;
    const auto letters = text::Tokenizer::from_vocabulary({U'a', U'b', U'c', U'd'});
    io::save_llama_folder(tied, letters, chars_dir.path);
    CHECK(!fs::exists(chars_dir.path / "tokenizer.model"));
    const auto chars_again = io::open_llama_folder<double>(chars_dir.path);
    CHECK(chars_again.tokenizer.kind() == text::Tokenizer::Kind::character);
    CHECK(chars_again.tokenizer.decode(chars_again.tokenizer.encode("dab")) == "dab");
    CHECK(chars_again.model(idx).value() == tied(idx).value());

    // sharded: two files and model.safetensors.index.json
    const ScratchDir shards;
    fs::copy_file(fixture / "config.json", shards.path / "config.json");
    fs::copy_file(fixture / "tokenizer.model", shards.path / "tokenizer.model");
    std::map<std::string, io::NpyArray> first, second;
    nlohmann::json map = nlohmann::json::object();
    for (const auto& [name, t] : theirs.tensors()) {
        const bool one = name.find("layers.1.") == std::string::npos;
        (one ? first : second).emplace(name, theirs.array(name));
        map[name] = one ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    }
    io::write_safetensors(shards.path / "model-00001-of-00002.safetensors", first);
    io::write_safetensors(shards.path / "model-00002-of-00002.safetensors", second);
    write_bytes(shards.path / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
    CHECK(logit_error(io::open_llama_folder<float>(shards.path).model) == logit_error(folder.model));
}

TEST_CASE("a broken Llama folder is one io_error naming the file and the field or tensor") {
    const auto config = nlohmann::json::parse(read_bytes(fixture / "config.json"));
    const auto with_config = [&](const std::function<void(nlohmann::json&)>& change, const std::string& message) {
        const ScratchDir dir;
        copy_fixture(dir.path);
        nlohmann::json c = config;
        change(c);
        write_bytes(dir.path / "config.json", c.dump());
        CHECK_THROWS_WITH_AS(io::open_llama_folder<float>(dir.path), doctest::Contains(message.c_str()), io_error);
    };
    with_config([](auto& c) { c.erase("hidden_size"); }, "config.json: field \"hidden_size\" is missing");
    with_config([](auto& c) { c["hidden_act"] = "gelu"; }, "field \"hidden_act\" is \"gelu\"");
    with_config([](auto& c) { c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}}; }, "field \"rope_scaling\" is set");
    with_config([](auto& c) { c["num_key_value_heads"] = 3; }, "n_kv_heads 3 does not divide n_heads 4");
    with_config([](auto& c) { c["model_type"] = "mistral"; }, "field \"model_type\" is \"mistral\"");
    with_config([](auto& c) { c["num_hidden_layers"] = 3; }, "missing keys: layers.2.attention.wq.weight");
    with_config([](auto& c) { c["num_hidden_layers"] = 1; }, "tensor 'model.layers.1.");
    with_config([](auto& c) { c["intermediate_size"] = 64; }, "layers.0.feed_forward.w1.weight has shape (48, 32), the model expects (64, 32)");
    with_config([](auto& c) { c["num_attention_heads"] = 2, c["num_key_value_heads"] = 2; },
                "tensor 'model.layers.0.self_attn.k_proj.weight' has shape (16, 32), config.json needs 32 rows");
    {
        const ScratchDir dir;
        copy_fixture(dir.path);
        fs::remove(dir.path / "tokenizer.model");
        CHECK_THROWS_WITH_AS(io::open_llama_folder<float>(dir.path), doctest::Contains("has no tokenizer.model"), io_error);
    }
    {
        const ScratchDir dir;
        copy_fixture(dir.path);
        fs::remove(dir.path / "model.safetensors");
        CHECK_THROWS_WITH_AS(io::open_llama_folder<float>(dir.path),
                             doctest::Contains("has neither model.safetensors nor model.safetensors.index.json"), io_error);
    }
    CHECK(io::is_llama_folder(fixture));
    CHECK(!io::is_llama_folder(fixture / "config.json"));
}

}  // namespace test_io_llama_folder
