// `xgrad attention` end to end (cli::run_attention, the command's body) against torch's outputs in
// tests/fixtures/io/attention/<case>/expected (tests/fixtures/make_io.py), and its bad-input paths:
// each an io_error naming the file or field, with nothing written to OUT.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "io/io_test_util.hpp"
#include "study/mha_files.hpp"
#include "xgrad/io/npy.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_attention_tool {

using namespace xgrad;
using xgrad::testing::ScratchDir;
namespace fs = std::filesystem;

namespace {

const fs::path cases_dir = fs::path(XGRAD_FIXTURES) / "io" / "attention";

// The Adam flags of a case (in/args.txt), parsed like the command line.
std::optional<cli::AttentionAdamOptions> adam_args(const fs::path& in) {
    if (!fs::exists(in / "args.txt")) return std::nullopt;
    std::istringstream words(xgrad::testing::read_bytes(in / "args.txt"));
    cli::AttentionAdamOptions a;
    for (std::string w; words >> w;) {
        if (w == "--amsgrad") a.amsgrad = true;
        else if (w == "--adamw") a.adamw = true;
        else {
            std::string v;
            words >> v;
            if (w == "--adam-steps") a.steps = std::stoi(v);
            else if (w == "--lr") a.lr = std::stod(v);
            else if (w == "--beta1") a.beta1 = std::stod(v);
            else if (w == "--beta2") a.beta2 = std::stod(v);
            else if (w == "--eps") a.eps = std::stod(v);
            else if (w == "--weight-decay") a.weight_decay = std::stod(v);
            else FAIL("unknown flag in args.txt: " << w);
        }
    }
    return a;
}

// Compares every expected file with the one written; both must hold the same set of files.
void compare_outputs(const fs::path& expected, const fs::path& out, double tol) {
    CHECK(ScratchDir::entries_of(expected) == ScratchDir::entries_of(out));
    for (const auto& name : ScratchDir::entries_of(expected)) {
        INFO(name);
        const auto want = io::read_npy(expected / name), got = io::read_npy(out / name);
        REQUIRE(want.shape == got.shape);
        CHECK(want.dtype == got.dtype);
        const auto w = want.as_xarray<double>(true), g = got.as_xarray<double>(true);
        double worst = 0;
        for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(w.data()[i] - g.data()[i]));
        CHECK(worst <= tol);
    }
}

// A copy of a case's inputs that a test may break.
struct CaseCopy {
    ScratchDir dir;
    fs::path in, out;
    explicit CaseCopy(const std::string& name) : in(dir.path / "in"), out(dir.path / "out") {
        fs::copy(cases_dir / name / "in", in);
    }
    std::string error() const {
        try {
            cli::run_attention(in, out);
        } catch (const io_error& e) {
            return e.what();
        }
        return "no io_error";
    }
};

}  // namespace

TEST_CASE("attention tool: forward, backward and Adam steps match torch") {
    for (const char* name : {"basic", "kvdim", "unbatched_f32", "adamw", "adam_l2"}) {
        INFO(name);
        ScratchDir dir;
        const fs::path in = cases_dir / name / "in";
        cli::run_attention(in, dir.path / "out", adam_args(in));
        compare_outputs(cases_dir / name / "expected", dir.path / "out", std::string(name).find("f32") != std::string::npos ? 1e-5 : 1e-10);
        CHECK(dir.entries() == std::vector<std::string>{"out"});  // the staging directory is gone
    }
}

TEST_CASE("attention tool: results go into an existing OUT directory, replacing files") {
    ScratchDir dir;
    fs::create_directory(dir.path / "out");
    xgrad::testing::write_bytes(dir.path / "out" / "output.npy", "old");
    cli::run_attention(cases_dir / "basic" / "in", dir.path / "out/");
    compare_outputs(cases_dir / "basic" / "expected", dir.path / "out", 1e-10);
}

TEST_CASE("attention tool: bad input names the file or field and writes nothing") {
    auto check = [](CaseCopy& c, const std::string& what) {
        const std::string msg = c.error();
        INFO(msg);
        CHECK(msg.find(what) != std::string::npos);
        CHECK_FALSE(fs::exists(c.out));
        CHECK(c.dir.entries() == std::vector<std::string>{"in"});
    };
    {
        CaseCopy c("basic");
        fs::remove(c.in / "out_proj.bias.npy");
        check(c, "out_proj.bias.npy: no such file");
    }
    {
        CaseCopy c("basic");
        fs::remove(c.in / "config.json");
        check(c, "config.json: no such file");
    }
    {
        CaseCopy c("basic");
        xgrad::testing::write_bytes(c.in / "config.json", "{\"embed_dim\": 4}");
        check(c, "config.json: field \"num_heads\" is missing");
    }
    {
        CaseCopy c("basic");  // config and files disagree
        auto cfg = xgrad::testing::read_bytes(c.in / "config.json");
        cfg.replace(cfg.find("\"kdim\": null"), 12, "\"kdim\": 3");
        xgrad::testing::write_bytes(c.in / "config.json", cfg);
        check(c, "key.npy: has shape (5, 2, 4), expected (5, 2, 3)");
        io::write_npy(c.in / "key.npy", xt::xtensor<double, 3>(xt::zeros<double>({5, 2, 3})));
        check(c, "q_proj_weight.npy: no such file");  // separate projections with kdim != embed_dim
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "in_proj_weight.npy", xt::xtensor<double, 2>(xt::zeros<double>({12, 3})));
        check(c, "in_proj_weight.npy: has shape (12, 3), expected (12, 4)");
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "out_proj.weight.npy", xt::xtensor<float, 2>(xt::zeros<float>({4, 4})));
        check(c, "out_proj.weight.npy: has dtype float32 but");
    }
    {
        CaseCopy c("basic");
        auto q = io::read_npy(c.in / "query.npy").as<double, 3>();
        q(1, 0, 2) = std::nan("");
        io::write_npy(c.in / "query.npy", q);
        check(c, "query.npy: element 10 is NaN");
    }
    {
        CaseCopy c("basic");
        auto g = io::read_npy(c.in / "grad_output.npy").as<double, 3>();
        g(0, 0, 0) = INFINITY;
        io::write_npy(c.in / "grad_output.npy", g);
        check(c, "grad_output.npy: element 0 is inf");
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "key.npy", xt::xtensor<double, 3>(xt::zeros<double>({5, 3, 4})));
        check(c, "key.npy: has shape (5, 3, 4), expected (5, 2, 4)");
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "value.npy", xt::xtensor<double, 2>(xt::zeros<double>({5, 4})));
        check(c, "value.npy: has shape (5, 4), expected a 3-D array");
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "attn_mask.npy", xt::xtensor<double, 2>(xt::zeros<double>({3, 4})));
        check(c, "attn_mask.npy: has shape (3, 4), expected (3, 5) or (4, 3, 5)");
    }
    {
        CaseCopy c("basic");
        io::write_npy(c.in / "key_padding_mask.npy", xt::xtensor<std::int64_t, 2>(xt::zeros<std::int64_t>({2, 5})));
        check(c, "key_padding_mask.npy: a mask must be bool or float");
    }
    {
        CaseCopy c("basic");
        auto m = io::read_npy(c.in / "attn_mask.npy").as<double, 2>();
        m(1, 1) = INFINITY;  // -inf is a mask's "ignore", +inf is not allowed
        io::write_npy(c.in / "attn_mask.npy", m);
        check(c, "attn_mask.npy: element 6 is inf");
    }
    {
        CaseCopy c("basic");
        xgrad::testing::write_bytes(c.in / "value.npy", "\x93NUMPY\x01");
        check(c, "value.npy: not an npy file");
    }
    {
        CaseCopy c("unbatched_f32");
        io::write_npy(c.in / "key.npy", xt::xtensor<double, 2>(xt::zeros<double>({4, 4})));
        check(c, "key.npy: has dtype float64 but");
    }
    {
        CaseCopy c("basic");
        xgrad::testing::write_bytes(c.out, "a file");
        CHECK(c.error().find("exists and is not a directory") != std::string::npos);
    }
}

}  // namespace test_cli_attention_tool
