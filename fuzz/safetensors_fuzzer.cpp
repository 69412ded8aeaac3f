// libFuzzer harness: io::SafetensorsFile::parse on arbitrary bytes, then every tensor it accepts
// through every conversion, and the writer's image of them read back unchanged.
// xgrad::error is the expected answer to bad input; any other exception escapes and is a finding.
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>

#include <xgrad/io/safetensors.hpp>

#include "fuzz_arrays.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::span<const std::byte> image(reinterpret_cast<const std::byte*>(data), size);
    std::map<std::string, xgrad::io::NpyArray> arrays;
    try {
        const auto st = xgrad::io::SafetensorsFile::parse(image, "fuzz.safetensors");
        for (const auto& [name, t] : st.tensors()) {
            xgrad_fuzz::check(t.bytes.size() == t.size() * xgrad::io::safetensors_itemsize(t.dtype));
            xgrad_fuzz::check(t.bytes.data() >= image.data() && t.bytes.data() + t.bytes.size() <= image.data() + size);
        }
        arrays = st.arrays();
    } catch (const xgrad::error&) {
        return 0;
    }
    for (const auto& [name, a] : arrays) {
        xgrad_fuzz::check(a.source == "fuzz.safetensors:" + name);
        xgrad_fuzz::exercise(a);
    }
    const auto again = xgrad::io::encode_safetensors(arrays);
    const auto back = xgrad::io::SafetensorsFile::parse(again, "re-encoded").arrays();
    xgrad_fuzz::check(back.size() == arrays.size());
    for (const auto& [name, a] : arrays) {
        const auto& b = back.at(name);
        xgrad_fuzz::check(b.dtype == a.dtype && b.shape == a.shape);
        // bool bytes other than 0 and 1 are written as 1
        if (a.dtype != xgrad::io::Dtype::bool8) xgrad_fuzz::check(b.bytes == a.bytes);
    }
    return 0;
}
