// libFuzzer harness: io::parse_npz on arbitrary bytes, then every conversion of each array.
// xgrad::error is the expected answer to bad input; any other exception escapes and is a finding.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include <xgrad/io/npz.hpp>

#include "fuzz_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::map<std::string, xgrad::io::NpyArray> arrays;
    try {
        arrays = xgrad::io::parse_npz(reinterpret_cast<const std::byte*>(data), size, "fuzz.npz");
    } catch (const xgrad::error&) {
        return 0;
    }
    for (const auto& [name, a] : arrays) {
        xgrad_fuzz::check(a.source == "fuzz.npz:" + name + ".npy");
        xgrad_fuzz::exercise(a);
    }
    return 0;
}
