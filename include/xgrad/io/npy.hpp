// .npy files (NumPy format 1.0, 2.0 and 3.0): read into an NpyArray (dtype tag, shape, raw bytes),
// convert to typed xtensors with checked dtype and rank, write format 1.0 atomically (the reader and
// the writer are compiled in libxgrad: lib/npy.cpp).
//
//   auto a = io::read_npy("w.npy");               // io_error naming the file on any problem
//   xt::xtensor<double, 2> w = a.as<double, 2>();  // float32 file: error unless as<double, 2>(true)
//   io::write_npy("out.npy", w);
//
// Supported dtypes: float32 '<f4', float64 '<f8', bool '|b1', int64 '<i8' (int32 '<i4' is read and
// widened to int64). C order only. Nothing is allocated beyond the bytes the file holds.
#pragma once
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/error.hpp"
#include "xgrad/io/file.hpp"

namespace xgrad::io {

static_assert(std::endian::native == std::endian::little, "xgrad: npy I/O assumes a little-endian host");

enum class Dtype { float32, float64, bool8, int64 };

inline const char* dtype_name(Dtype d) {
    switch (d) {
        case Dtype::float32: return "float32";
        case Dtype::float64: return "float64";
        case Dtype::bool8: return "bool";
        case Dtype::int64: return "int64";
    }
    return "?";
}
inline std::size_t itemsize(Dtype d) { return d == Dtype::float32 ? 4 : d == Dtype::bool8 ? 1 : 8; }
inline const char* dtype_descr(Dtype d) {
    return d == Dtype::float32 ? "<f4" : d == Dtype::float64 ? "<f8" : d == Dtype::bool8 ? "|b1" : "<i8";
}

template <class T>
constexpr Dtype dtype_of() {
    if constexpr (std::is_same_v<T, float>) return Dtype::float32;
    else if constexpr (std::is_same_v<T, double>) return Dtype::float64;
    else if constexpr (std::is_same_v<T, bool>) return Dtype::bool8;
    else {
        static_assert(std::is_same_v<T, std::int64_t>, "xgrad: npy element type must be float, double, bool or int64_t");
        return Dtype::int64;
    }
}

// One array as stored: little-endian elements in C order.
struct NpyArray {
    Dtype dtype = Dtype::float64;
    std::vector<std::size_t> shape;
    std::vector<std::byte> bytes;  // size() · itemsize(dtype) bytes
    std::string source;            // where it came from ("dir/x.npy", "ckpt.npz:fc.weight"), for messages

    std::size_t size() const {
        std::size_t n = 1;
        for (auto d : shape) n *= d;
        return n;
    }
    bool is_float() const { return dtype == Dtype::float32 || dtype == Dtype::float64; }

    // The array as xtensor<T, N>. Throws io_error on a rank or dtype mismatch; float32 <-> float64
    // is converted only when convert_float is true.
    template <class T, std::size_t N>
    xt::xtensor<T, N> as(bool convert_float = false) const {
        if (shape.size() != N)
            throw io_error(source + ": expected a " + std::to_string(N) + "-D array, got shape " + shape_str(shape));
        std::array<std::size_t, N> s{};
        for (std::size_t k = 0; k < N; ++k) s[k] = shape[k];
        auto out = xt::xtensor<T, N>::from_shape(s);
        copy_to<T>(out.data(), convert_float);
        return out;
    }
    // The array as xarray<T> of any rank (masks that may be 2-D or 3-D).
    template <class T>
    xt::xarray<T> as_xarray(bool convert_float = false) const {
        auto out = xt::xarray<T>::from_shape(shape);
        copy_to<T>(out.data(), convert_float);
        return out;
    }
    // Writes the size() elements as T into dst (checks dtype as as<T, N>() does).
    template <class T>
    void copy_to(T* dst, bool convert_float = false) const {
        constexpr Dtype want = dtype_of<T>();
        const std::size_t n = size();
        if (dtype == want) {
            if constexpr (std::is_same_v<T, bool>) {
                for (std::size_t i = 0; i < n; ++i) dst[i] = bytes[i] != std::byte{0};
            } else if (n > 0) {  // an empty array's buffers may be null pointers, which memcpy must not get
                std::memcpy(dst, bytes.data(), n * sizeof(T));
            }
            return;
        }
        if constexpr (std::is_floating_point_v<T>) {
            if (convert_float && is_float()) {
                if (dtype == Dtype::float32) {
                    for (std::size_t i = 0; i < n; ++i) dst[i] = T(load<float>(i));
                } else {
                    for (std::size_t i = 0; i < n; ++i) dst[i] = T(load<double>(i));
                }
                return;
            }
        }
        throw io_error(source + ": has dtype " + dtype_name(dtype) + ", expected " + dtype_name(want));
    }

    // "element i is NaN" (or "inf", "-inf") for the first non-finite element of a float array, -inf
    // passing when allow_minus_inf (a mask's "ignore"); nullopt when there is none or no float dtype.
    std::optional<std::string> first_nonfinite(bool allow_minus_inf = false) const {
        for (std::size_t i = 0, n = is_float() ? size() : 0; i < n; ++i) {
            const double v = dtype == Dtype::float32 ? double(load<float>(i)) : load<double>(i);
            if (std::isfinite(v) || (allow_minus_inf && v < 0)) continue;
            return "element " + std::to_string(i) + " is " + (std::isnan(v) ? "NaN" : v < 0 ? "-inf" : "inf");
        }
        return std::nullopt;
    }

    // An NpyArray holding a copy of an xtensor/xarray container (row-major iteration order).
    template <class E>
    static NpyArray from(const E& e) {
        using T = std::remove_cv_t<typename E::value_type>;
        NpyArray a;
        a.dtype = dtype_of<T>();
        a.shape.assign(e.shape().begin(), e.shape().end());
        a.bytes.resize(a.size() * sizeof(T));
        std::size_t i = 0;
        for (auto it = e.begin(); it != e.end(); ++it, ++i) {
            if constexpr (std::is_same_v<T, bool>) {
                a.bytes[i] = std::byte(*it ? 1 : 0);
            } else {
                const T v = *it;
                std::memcpy(a.bytes.data() + i * sizeof(T), &v, sizeof(T));
            }
        }
        return a;
    }

private:
    template <class U>
    U load(std::size_t i) const {
        U v;
        std::memcpy(&v, bytes.data() + i * sizeof(U), sizeof(U));
        return v;
    }
};

// Parses a whole .npy image held in memory; `source` names it in error messages.
NpyArray parse_npy(const std::byte* data, std::size_t size, const std::string& source);

// The .npy file at `path` (io_error naming it on any problem).
NpyArray read_npy(const std::filesystem::path& path);

// The .npy image of an array: format 1.0 (2.0 only when the header would not fit in 64 KiB).
std::vector<std::byte> encode_npy(const NpyArray& a);

// Writes the array as an .npy file, atomically (a temporary file and a rename).
void write_npy(const std::filesystem::path& path, const NpyArray& a);
template <class T, std::size_t N>
void write_npy(const std::filesystem::path& path, const xt::xtensor<T, N>& x) {
    write_npy(path, NpyArray::from(x));
}
template <class T>
void write_npy(const std::filesystem::path& path, const xt::xarray<T>& x) {
    write_npy(path, NpyArray::from(x));
}

}  // namespace xgrad::io
