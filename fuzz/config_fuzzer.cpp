// libFuzzer harness: the xgrad tool's cli::parse_attention_config (src/study/json_config.hpp) on
// arbitrary text; an accepted config must be consistent. xgrad::error is the expected answer to bad
// input; any other exception is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "study/json_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    xgrad::cli::AttentionConfig c;
    try {
        c = xgrad::cli::parse_attention_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    } catch (const xgrad::error&) {
        return 0;
    }
    const auto& m = c.mha;
    const bool ok = m.embed_dim > 0 && m.num_heads > 0 && m.embed_dim % m.num_heads == 0 &&
                    (!m.kdim || *m.kdim > 0) && (!m.vdim || *m.vdim > 0);
    if (!ok) std::abort();
    return 0;
}
