// .npy files (NumPy format 1.0, 2.0 and 3.0): read into an NpyArray (dtype tag, shape, raw bytes),
// convert to typed xtensors with checked dtype and rank, write format 1.0 atomically.
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
#include <limits>
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

namespace detail {

// A parser for the header dict numpy writes: {'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }
class NpyHeaderParser {
public:
    NpyHeaderParser(const std::string& text, const std::string& source) : s_(text), src_(source) {}

    struct Header {
        std::string descr;
        bool fortran_order = false;
        std::vector<std::size_t> shape;
    };

    Header parse() {
        Header h;
        bool seen_descr = false, seen_order = false, seen_shape = false;
        skip_ws();
        expect('{');
        while (true) {
            skip_ws();
            if (eat('}')) break;
            const std::string key = string_literal();
            skip_ws();
            expect(':');
            skip_ws();
            if (key == "descr" && !seen_descr) {
                if (peek() == '[') fail("structured dtypes are not supported");
                h.descr = string_literal(), seen_descr = true;
            } else if (key == "fortran_order" && !seen_order) {
                h.fortran_order = boolean(), seen_order = true;
            } else if (key == "shape" && !seen_shape) {
                h.shape = tuple(), seen_shape = true;
            } else {
                fail("unexpected or repeated key '" + key + "'");
            }
            skip_ws();
            if (eat('}')) break;
            expect(',');
        }
        skip_ws();
        if (i_ != s_.size()) fail("unexpected text after the dict");
        if (!seen_descr || !seen_order || !seen_shape) fail("the dict needs the keys 'descr', 'fortran_order' and 'shape'");
        return h;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw io_error(src_ + ": the header is not a valid npy header dict (" + what + " at offset " +
                       std::to_string(i_) + ")");
    }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    bool eat(char c) {
        if (peek() != c || i_ >= s_.size()) return false;
        ++i_;
        return true;
    }
    void expect(char c) {
        if (!eat(c)) fail(std::string("expected '") + c + "'");
    }
    void skip_ws() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    }
    std::string string_literal() {
        const char q = peek();
        if (q != '\'' && q != '"') fail("expected a string");
        const std::size_t start = ++i_;
        while (i_ < s_.size() && s_[i_] != q) {
            if (s_[i_] == '\\') fail("escapes in strings are not supported");
            ++i_;
        }
        if (i_ >= s_.size()) fail("unterminated string");
        return s_.substr(start, i_++ - start);
    }
    bool boolean() {
        if (s_.compare(i_, 4, "True") == 0) return i_ += 4, true;
        if (s_.compare(i_, 5, "False") == 0) return i_ += 5, false;
        fail("expected True or False");
    }
    std::size_t integer() {
        if (peek() < '0' || peek() > '9') fail("expected a non-negative integer");
        std::size_t v = 0;
        while (peek() >= '0' && peek() <= '9') {
            const std::size_t digit = std::size_t(s_[i_++] - '0');
            if (v > (std::numeric_limits<std::size_t>::max() - digit) / 10) fail("dimension too large");
            v = v * 10 + digit;
        }
        return v;
    }
    std::vector<std::size_t> tuple() {
        std::vector<std::size_t> dims;
        expect('(');
        skip_ws();
        if (eat(')')) return dims;
        while (true) {
            dims.push_back(integer());
            skip_ws();
            if (eat(')')) break;
            expect(',');
            skip_ws();
            if (eat(')')) break;
        }
        if (dims.size() > 32) fail("more than 32 dimensions");
        return dims;
    }

    const std::string& s_;
    const std::string& src_;
    std::size_t i_ = 0;
};

inline Dtype dtype_from_descr(const std::string& d, const std::string& source, bool& widen_int32) {
    widen_int32 = false;
    if (d == "<f4") return Dtype::float32;
    if (d == "<f8") return Dtype::float64;
    if (d == "|b1") return Dtype::bool8;
    if (d == "<i8") return Dtype::int64;
    if (d == "<i4") return widen_int32 = true, Dtype::int64;
    if (!d.empty() && d[0] == '>') throw io_error(source + ": big-endian dtype '" + d + "' is not supported");
    throw io_error(source + ": unsupported dtype '" + d + "' (supported: <f4, <f8, |b1, <i8, <i4)");
}

inline std::uint32_t read_le(const unsigned char* p, std::size_t n) {
    std::uint32_t v = 0;
    for (std::size_t k = n; k-- > 0;) v = (v << 8) | p[k];
    return v;
}

}  // namespace detail

// Parses a whole .npy image held in memory; `source` names it in error messages.
inline NpyArray parse_npy(const std::byte* data, std::size_t size, const std::string& source) {
    const auto* p = reinterpret_cast<const unsigned char*>(data);
    static constexpr unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (size < 8 || std::memcmp(p, magic, 6) != 0) throw io_error(source + ": not an npy file (wrong magic)");
    const int major = p[6], minor = p[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        throw io_error(source + ": unsupported npy format version " + std::to_string(major) + "." + std::to_string(minor));
    const std::size_t len_bytes = major == 1 ? 2 : 4;
    if (size < 8 + len_bytes) throw io_error(source + ": truncated header");
    const std::size_t header_len = detail::read_le(p + 8, len_bytes);
    const std::size_t data_offset = 8 + len_bytes + header_len;
    if (header_len > size - 8 - len_bytes)
        throw io_error(source + ": truncated header (declares " + std::to_string(header_len) + " bytes, file has " +
                       std::to_string(size - 8 - len_bytes) + ")");
    const std::string text(reinterpret_cast<const char*>(p + 8 + len_bytes), header_len);
    const auto header = detail::NpyHeaderParser(text, source).parse();
    bool widen = false;
    NpyArray a;
    a.source = source;
    a.dtype = detail::dtype_from_descr(header.descr, source, widen);
    if (header.fortran_order) throw io_error(source + ": fortran_order=True (column-major) arrays are not supported");
    a.shape = header.shape;
    // numpy's limit, kept also when a zero dim leaves no elements: the nonzero dims multiply to at most
    // PTRDIFF_MAX / 8, so xtensor's strides (signed products of the dims) and any 8-byte copy fit.
    constexpr std::size_t max_elements = std::size_t(std::numeric_limits<std::ptrdiff_t>::max()) / 8;
    std::size_t count = 1, nonzero = 1;
    for (auto d : a.shape) {
        if (d != 0 && (__builtin_mul_overflow(nonzero, d, &nonzero) || nonzero > max_elements))
            throw io_error(source + ": shape " + shape_str(a.shape) + " has too many elements");
        count *= d;  // at most nonzero
    }
    const std::size_t stored_item = widen ? 4 : itemsize(a.dtype);
    const std::size_t need = count * stored_item;
    const std::size_t have = size - data_offset;
    if (need > have)
        throw io_error(source + ": truncated data: shape " + shape_str(a.shape) + " of " + header.descr + " needs " +
                       std::to_string(need) + " bytes, the file holds " + std::to_string(have));
    if (need < have)
        throw io_error(source + ": " + std::to_string(have - need) + " unexpected bytes after the data of shape " +
                       shape_str(a.shape));
    if (!widen) {
        a.bytes.assign(data + data_offset, data + data_offset + need);
    } else {
        a.bytes.resize(count * 8);
        for (std::size_t i = 0; i < count; ++i) {
            std::int32_t v;
            std::memcpy(&v, data + data_offset + 4 * i, 4);
            const std::int64_t w = v;
            std::memcpy(a.bytes.data() + 8 * i, &w, 8);
        }
    }
    return a;
}

inline NpyArray read_npy(const std::filesystem::path& path) {
    const auto bytes = read_file_bytes(path);
    return parse_npy(bytes.data(), bytes.size(), path.string());
}

// The .npy image of an array: format 1.0 (2.0 only when the header would not fit in 64 KiB).
inline std::vector<std::byte> encode_npy(const NpyArray& a) {
    std::string dims;
    for (std::size_t k = 0; k < a.shape.size(); ++k) dims += (k ? ", " : "") + std::to_string(a.shape[k]);
    if (a.shape.size() == 1) dims += ",";
    std::string header = std::string("{'descr': '") + dtype_descr(a.dtype) + "', 'fortran_order': False, 'shape': (" +
                         dims + "), }";
    const bool v2 = header.size() + 11 > 65535;
    const std::size_t prefix = v2 ? 12 : 10;
    const std::size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
    header.append(total - prefix - header.size() - 1, ' ');
    header += '\n';
    std::vector<std::byte> out(total + a.bytes.size());
    const unsigned char head[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<unsigned char>(v2 ? 2 : 1), 0};
    std::memcpy(out.data(), head, 8);
    const std::size_t hl = header.size();
    for (std::size_t k = 0; k < prefix - 8; ++k) out[8 + k] = std::byte((hl >> (8 * k)) & 0xff);
    std::memcpy(out.data() + prefix, header.data(), hl);
    if (!a.bytes.empty()) std::memcpy(out.data() + total, a.bytes.data(), a.bytes.size());
    return out;
}

inline void write_npy(const std::filesystem::path& path, const NpyArray& a) {
    const auto bytes = encode_npy(a);
    write_file_atomic(path, bytes.data(), bytes.size());
}
template <class T, std::size_t N>
void write_npy(const std::filesystem::path& path, const xt::xtensor<T, N>& x) {
    write_npy(path, NpyArray::from(x));
}
template <class T>
void write_npy(const std::filesystem::path& path, const xt::xarray<T>& x) {
    write_npy(path, NpyArray::from(x));
}

}  // namespace xgrad::io
