// llama2.c's checkpoint (io/llama2c.hpp) against llama2.c's own export.py (legacy_export, run as
// written by tests/fixtures/make_llama.py on model.py's float32 model): read, every weight equal to
// model.py's; written back, the same bytes (the rotary tables within an ulp), tied and untied; and
// the header's checks.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "io/io_test_util.hpp"
#include "xgrad/io/llama2c.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/io/state_dict.hpp"

namespace test_io_llama2c {

using namespace xgrad;
using testing::io_error_of, testing::read_bytes, testing::write_bytes, testing::ScratchDir;

const std::string fixtures = std::string(XGRAD_FIXTURES) + "/llama/";

TEST_CASE("llama2.c checkpoint: export.py's file read into nn::Llama with model.py's weights, written back byte for byte") {
    const auto reference = io::read_npz(fixtures + "legacy_params.npz");
    for (const bool tied : {true, false}) {
        CAPTURE(tied);
        const std::string name = tied ? "legacy_tied.bin" : "legacy_untied.bin";
        const io::Llama2cFile f = io::read_llama2c(fixtures + name);
        CHECK(f.config.dim == 16);
        CHECK(f.config.n_layers == 2);
        CHECK(f.config.n_heads == 2);
        CHECK(f.config.kv_heads() == 2);
        CHECK(f.config.vocab_size == 24);
        CHECK(f.config.ffn_hidden() == 48);
        CHECK(f.config.max_seq_len == 8);
        CHECK(f.config.tie_embeddings == tied);
        Generator gen(1);
        nn::Llama<float> model(f.config, gen);
        io::load_llama2c(model, f);
        CHECK((model.output.weight.node() == model.tok_embeddings.weight.node()) == tied);
        std::size_t compared = 0;
        for_each_parameter_name(model, [&](const std::string& pname, const auto& var) {
            CAPTURE(pname);
            const io::NpyArray source = pname == "output.weight" && !tied ? io::read_npy(fixtures + "legacy_untied_output.npy")
                                                                          : reference.at(pname);
            std::vector<float> want(var.size());
            source.copy_to<float>(want.data(), true);
            CHECK(std::equal(want.begin(), want.end(), var.value().data()));
            ++compared;
        });
        CHECK(compared == 2 + 9 * 2 + 1);
        // Written back: the same header and weights, byte for byte. The rotary tables (which run.c
        // skips) are xgrad's own float32 cos and sin, correctly rounded by glibc; torch's vectorized
        // ones are 1 ulp off in 4 of these 64 values.
        ScratchDir dir;
        io::save_llama2c(model, dir.path / "model.bin");
        const std::string ours = read_bytes(dir.path / "model.bin"), theirs = read_bytes(fixtures + name);
        REQUIRE(ours.size() == theirs.size());
        const std::size_t rope_end = ours.size() - (tied ? 0 : 24 * 16 * sizeof(float)), rope_begin = rope_end - 64 * sizeof(float);
        CHECK(ours.substr(0, rope_begin) == theirs.substr(0, rope_begin));
        CHECK(ours.substr(rope_end) == theirs.substr(rope_end));
        std::vector<float> a(64), b(64);
        std::memcpy(a.data(), ours.data() + rope_begin, 64 * sizeof(float));
        std::memcpy(b.data(), theirs.data() + rope_begin, 64 * sizeof(float));
        for (std::size_t i = 0; i < 64; ++i) CHECK(std::abs(a[i] - b[i]) <= 1.2e-7f);
    }
}

TEST_CASE("llama2.c checkpoint: a model written and read back gives the same logits, in float64 too") {
    const nn::LlamaConfig c{.dim = 12, .n_layers = 2, .n_heads = 3, .n_kv_heads = 1, .vocab_size = 11, .hidden_dim = 20,
                            .max_seq_len = 6, .tie_embeddings = false};
    Generator gen(3);
    const nn::Llama<double> model(c, gen);
    ScratchDir dir;
    io::save_llama2c(model, dir.path / "m.bin");
    const io::Llama2cFile f = io::read_llama2c(dir.path / "m.bin");
    nn::Llama<double> back(f.config, gen);
    io::load_llama2c(back, f);
    const xt::xtensor<std::int64_t, 2> idx{{1, 5, 10, 0}};
    // float32 in the file: the logits agree to float32's rounding of the weights
    CHECK(xt::allclose(back(idx).value(), model(idx).value(), 1e-5, 1e-6));
    CHECK(back.layers[1].attention.wk.weight.shape() == std::array<std::size_t, 2>{4, 12});
}

TEST_CASE("llama2.c checkpoint: a header that does not fit the file or the model is an io_error naming the file") {
    ScratchDir dir;
    const std::string good = read_bytes(fixtures + "legacy_tied.bin");
    write_bytes(dir.path / "short.bin", good.substr(0, good.size() - 4));
    CHECK(io_error_of([&] { io::read_llama2c(dir.path / "short.bin"); })
              .find("short.bin: holds 28732 bytes of weights, its header (dim 16, 2 layers, vocab 24, tied) asks for 28736") !=
          std::string::npos);
    std::string bad = good;
    bad[4 * 4] = 3;  // n_kv_heads 3 of 2 heads
    write_bytes(dir.path / "heads.bin", bad);
    CHECK(io_error_of([&] { io::read_llama2c(dir.path / "heads.bin"); }).find("n_kv_heads 3 does not divide n_heads 2") !=
          std::string::npos);
    bad = good;
    bad[3] = char(0x80);  // dim negative
    write_bytes(dir.path / "neg.bin", bad);
    CHECK(io_error_of([&] { io::read_llama2c(dir.path / "neg.bin"); }).find("header field dim is") != std::string::npos);
    write_bytes(dir.path / "tiny.bin", "abc");
    CHECK(io_error_of([&] { io::read_llama2c(dir.path / "tiny.bin"); }).find("too short") != std::string::npos);
    const io::Llama2cFile f = io::read_llama2c(fixtures + "legacy_tied.bin");
    Generator gen(1);
    nn::LlamaConfig other = f.config;
    other.n_layers = 1;
    nn::Llama<float> wrong(other, gen);
    CHECK(io_error_of([&] { io::load_llama2c(wrong, f); }).find("does not fit the model") != std::string::npos);
}

}  // namespace test_io_llama2c
