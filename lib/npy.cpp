// .npy files: the header's parser, the reader and the writer of xgrad/io/npy.hpp, compiled once in
// libxgrad (lib/model_files.cpp; scripts/fuzz compiles it beside its harnesses).
#include <cstring>
#include <limits>

#include "xgrad/io/npy.hpp"

namespace xgrad::io {

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

Dtype dtype_from_descr(const std::string& d, const std::string& source, bool& widen_int32) {
    widen_int32 = false;
    if (d == "<f4") return Dtype::float32;
    if (d == "<f8") return Dtype::float64;
    if (d == "|b1") return Dtype::bool8;
    if (d == "<i8") return Dtype::int64;
    if (d == "<i4") return widen_int32 = true, Dtype::int64;
    if (!d.empty() && d[0] == '>') throw io_error(source + ": big-endian dtype '" + d + "' is not supported");
    throw io_error(source + ": unsupported dtype '" + d + "' (supported: <f4, <f8, |b1, <i8, <i4)");
}

std::uint32_t read_le(const unsigned char* p, std::size_t n) {
    std::uint32_t v = 0;
    for (std::size_t k = n; k-- > 0;) v = (v << 8) | p[k];
    return v;
}

}  // namespace detail

NpyArray parse_npy(const std::byte* data, std::size_t size, const std::string& source) {
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

NpyArray read_npy(const std::filesystem::path& path) {
    const auto bytes = read_file_bytes(path);
    return parse_npy(bytes.data(), bytes.size(), path.string());
}

std::vector<std::byte> encode_npy(const NpyArray& a) {
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

void write_npy(const std::filesystem::path& path, const NpyArray& a) {
    const auto bytes = encode_npy(a);
    write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace xgrad::io
