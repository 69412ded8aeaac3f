// libFuzzer harness: io::parse_gpt2_config (a Hugging Face GPT-2 folder's config.json, behind
// read_gpt2_config and `--model DIR`) on arbitrary text. An accepted config must be one nn::GPT
// takes (GPTConfig::validate) and must come back unchanged from the text gpt2_config_json writes
// for it. xgrad::error is the expected answer to bad input; any other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <xgrad/io/gpt2_config.hpp>

#include "fuzz_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    xgrad::nn::GPTConfig c;
    try {
        c = xgrad::io::parse_gpt2_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const xgrad::error&) {
        return 0;
    }
    c.validate();  // throws (escaping: a finding) on what nn::GPT would refuse
    xgrad_fuzz::check(c.n_embd % c.n_head == 0 && c.dropout == 0);
    const xgrad::nn::GPTConfig back = xgrad::io::parse_gpt2_config(xgrad::io::gpt2_config_json(c), "written");
    xgrad_fuzz::check(back.n_layer == c.n_layer && back.n_head == c.n_head && back.n_embd == c.n_embd &&
                      back.block_size == c.block_size && back.vocab_size == c.vocab_size && back.bias == c.bias &&
                      back.gelu == c.gelu && back.dropout == c.dropout);
    return 0;
}
