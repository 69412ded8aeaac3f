// libFuzzer harness: io::parse_hf_llama_config (a Hugging Face Llama folder's config.json, behind
// open_llama_folder and `--model DIR`) on arbitrary text. An accepted config must be one nn::Llama
// takes (LlamaConfig::validate) and must come back unchanged from the text hf_llama_config_json
// writes for it. xgrad::error is the expected answer to bad input; any other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include <xgrad/io/llama_config_json.hpp>

#include "fuzz_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    xgrad::nn::LlamaConfig c;
    try {
        c = xgrad::io::parse_hf_llama_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const xgrad::error&) {
        return 0;
    }
    c.validate();  // throws (escaping: a finding) on what nn::Llama would refuse
    xgrad_fuzz::check(c.dim % c.n_heads == 0 && c.n_heads % c.kv_heads() == 0 && c.dropout == 0);
    const xgrad::nn::LlamaConfig back = xgrad::io::parse_hf_llama_config(xgrad::io::hf_llama_config_json(c), "written");
    xgrad_fuzz::check(back.dim == c.dim && back.n_layers == c.n_layers && back.n_heads == c.n_heads &&
                      back.kv_heads() == c.kv_heads() && back.vocab_size == c.vocab_size &&
                      back.ffn_hidden() == c.ffn_hidden() && back.max_seq_len == c.max_seq_len &&
                      back.norm_eps == c.norm_eps && back.rope_theta == c.rope_theta &&
                      back.tie_embeddings == c.tie_embeddings);
    return 0;
}
