// The JSON config of `xgrad attention` (src/study/json_config.hpp): every field parsed, and every
// bad config an io_error naming the file and the field. (`xgrad transformer`'s config, read with the
// same ConfigReader: tests/cli/transformer_tool.cpp.)
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <utility>

#include "io/io_test_util.hpp"
#include "study/json_config.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_cli_json_config {

using namespace xgrad;
using xgrad::testing::io_error_of;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;

namespace {

const char* valid_config = R"({"embed_dim": 6, "num_heads": 3, "bias": true, "add_bias_kv": false,
  "add_zero_attn": true, "kdim": null, "vdim": 5, "batch_first": true, "need_weights": false,
  "average_attn_weights": true})";

}  // namespace

TEST_CASE("attention config: parses every field; bad configs name the file and the field") {
    const auto c = cli::parse_attention_config(valid_config, "cfg.json");
    CHECK(c.mha.embed_dim == 6);
    CHECK(c.mha.num_heads == 3);
    CHECK(c.mha.bias);
    CHECK_FALSE(c.mha.add_bias_kv);
    CHECK(c.mha.add_zero_attn);
    CHECK_FALSE(c.mha.kdim.has_value());
    CHECK(c.mha.vdim == std::optional<std::size_t>(5));
    CHECK(c.mha.batch_first);
    CHECK_FALSE(c.need_weights);
    CHECK(c.average_attn_weights);
    auto edited = [](const std::string& from, const std::string& to) {
        std::string s = valid_config;
        s.replace(s.find(from), from.size(), to);
        return s;
    };
    const std::pair<std::string, std::string> bad[] = {
        {edited("\"embed_dim\": 6, ", ""), "field \"embed_dim\" is missing"},
        {edited("\"bias\": true", "\"bias\": 1"), "field \"bias\" must be true or false"},
        {edited("\"num_heads\": 3", "\"num_heads\": \"3\""), "field \"num_heads\" must be a positive integer"},
        {edited("\"num_heads\": 3", "\"num_heads\": 0"), "field \"num_heads\" must be a positive integer"},
        {edited("\"embed_dim\": 6", "\"embed_dim\": 6.5"), "field \"embed_dim\" must be a positive integer"},
        {edited("\"vdim\": 5", "\"vdim\": -5"), "field \"vdim\" must be a positive integer or null"},
        {edited("\"kdim\": null", "\"kdim\": false"), "field \"kdim\" must be a positive integer or null"},
        {edited("\"num_heads\": 3", "\"num_heads\": 4"), "field \"embed_dim\" (6) must be divisible by num_heads (4)"},
        {edited("\"bias\": true", "\"bias\": true, \"dropout\": 0.1"), "unknown field \"dropout\""},
        {edited("}", ""), "malformed JSON"},
        {"[1, 2]", "must be a JSON object"},
        {edited("\"vdim\": 5", "\"vdim\": 1e400"), "malformed JSON"},  // out of double's range
        // a structured value is named by its type: printing a deeply nested one would exhaust the stack
        {edited("\"vdim\": 5", "\"vdim\": " + std::string(100000, '[') + std::string(100000, ']')),
         "field \"vdim\" must be a positive integer or null, got an array"},
    };
    for (const auto& [text, why] : bad) {
        const std::string msg = io_error_of([&] { cli::parse_attention_config(text, "dir/config.json"); });
        INFO(msg);
        CHECK(msg.find("dir/config.json") == 0);
        CHECK(msg.find(why) != std::string::npos);
    }
    ScratchDir dir;
    CHECK(io_error_of([&] { cli::read_attention_config(dir.path / "config.json"); }).find("config.json: no such file") !=
          std::string::npos);
    write_bytes(dir.path / "config.json", valid_config);
    CHECK(cli::read_attention_config(dir.path / "config.json").mha.vdim == std::optional<std::size_t>(5));
}

}  // namespace test_cli_json_config
