// Shared by the npy and npz harnesses: every conversion of an array the reader accepted.
// An xgrad::error is the expected answer to a conversion the dtype does not allow; a conversion
// the dtype allows must succeed and give the stored values. Anything else aborts (a finding).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include <xgrad/io/npy.hpp>

namespace xgrad_fuzz {

inline void check(bool ok) {
    if (!ok) std::abort();
}

// as_xarray<T>(convert_float) succeeds exactly when `allowed`, and then holds every element.
template <class T>
void convert(const xgrad::io::NpyArray& a, bool convert_float, bool allowed) {
    bool threw = false;
    try {
        const auto x = a.as_xarray<T>(convert_float);
        check(x.size() == a.size());
        check(std::equal(x.shape().begin(), x.shape().end(), a.shape.begin(), a.shape.end()));
        if constexpr (std::is_same_v<T, bool>) {
            for (std::size_t i = 0; i < x.size(); ++i) check(x.data()[i] == (a.bytes[i] != std::byte{0}));
        } else if (xgrad::io::dtype_of<T>() == a.dtype && x.size() > 0) {
            check(std::memcmp(x.data(), a.bytes.data(), x.size() * sizeof(T)) == 0);
        }
    } catch (const xgrad::error&) {
        threw = true;
    }
    check(threw != allowed);
}

inline void exercise(const xgrad::io::NpyArray& a) {
    using xgrad::io::Dtype;
    check(a.bytes.size() == a.size() * xgrad::io::itemsize(a.dtype));
    convert<double>(a, true, a.is_float());
    convert<float>(a, true, a.is_float());
    convert<double>(a, false, a.dtype == Dtype::float64);
    convert<bool>(a, false, a.dtype == Dtype::bool8);
    convert<std::int64_t>(a, false, a.dtype == Dtype::int64);
    // What the writer makes of it reads back unchanged.
    const auto image = xgrad::io::encode_npy(a);
    const auto back = xgrad::io::parse_npy(image.data(), image.size(), "re-encoded");
    check(back.dtype == a.dtype && back.shape == a.shape && back.bytes == a.bytes);
}

}  // namespace xgrad_fuzz
