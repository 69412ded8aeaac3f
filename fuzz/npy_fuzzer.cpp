// libFuzzer harness: io::parse_npy on arbitrary bytes, then every conversion of what it accepts.
// xgrad::error is the expected answer to bad input; any other exception escapes and is a finding.
#include <cstddef>
#include <cstdint>

#include <xgrad/io/npy.hpp>

#include "fuzz_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    xgrad::io::NpyArray a;
    try {
        a = xgrad::io::parse_npy(reinterpret_cast<const std::byte*>(data), size, "fuzz.npy");
    } catch (const xgrad::error&) {
        return 0;
    }
    xgrad_fuzz::check(a.source == "fuzz.npy");
    xgrad_fuzz::exercise(a);
    return 0;
}
