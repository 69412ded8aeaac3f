// .safetensors reading, checking and writing (include/xgrad/io/safetensors.hpp). Checked as
// huggingface/safetensors (safetensors/src/tensor.rs, read_metadata and Metadata::validate) checks.
#include "xgrad/io/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "json.hpp"

namespace xgrad::io {
using xgrad::detail::json_text;
namespace {

constexpr std::uint64_t max_header_size = 100'000'000;  // the reference's MAX_HEADER_SIZE

constexpr SafetensorsDtype all_dtypes[] = {SafetensorsDtype::F64, SafetensorsDtype::F32, SafetensorsDtype::F16,
                                           SafetensorsDtype::BF16, SafetensorsDtype::I64, SafetensorsDtype::I32,
                                           SafetensorsDtype::U8, SafetensorsDtype::BOOL};

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

nlohmann::json parse_header(const char* begin, const char* end, const std::string& source) {
    nlohmann::json header = xgrad::detail::parse_json_unique_keys(begin, end, source + ": the header");
    if (!header.is_object()) throw io_error(source + ": the header is not a JSON object");
    return header;
}

SafetensorsDtype dtype_of_name(const nlohmann::json& j, const std::string& where) {
    if (!j.is_string()) throw io_error(where + ": \"dtype\" is not a string");
    const auto name = j.get<std::string>();
    for (auto d : all_dtypes)
        if (name == safetensors_dtype_name(d)) return d;
    throw io_error(where + ": dtype " + in_quotes(name) + " is unknown or not supported (supported: F64, F32, F16, BF16, "
                   "I64, I32, U8, BOOL)");
}

std::uint64_t unsigned_of(const nlohmann::json& j, const std::string& where, const char* field) {
    if (!j.is_number_unsigned()) throw io_error(where + ": \"" + field + "\" holds " + json_text(j) + ", not a non-negative integer");
    return j.get<std::uint64_t>();
}

const nlohmann::json& field(const nlohmann::json& info, const char* name, const std::string& where) {
    const auto it = info.find(name);
    if (it == info.end()) throw io_error(where + ": has no \"" + name + "\"");
    return *it;
}

struct Entry {
    std::string name;
    SafetensorsTensor tensor;
    std::uint64_t begin = 0, end = 0;
};

Entry entry_of(const std::string& name, const nlohmann::json& info, const std::string& source) {
    const std::string where = source + ": tensor " + in_quotes(name);
    if (!info.is_object()) throw io_error(where + ": its entry is not a JSON object");
    Entry e;
    e.name = name;
    e.tensor.dtype = dtype_of_name(field(info, "dtype", where), where);
    const auto& shape = field(info, "shape", where);
    if (!shape.is_array()) throw io_error(where + ": \"shape\" is not an array");
    for (const auto& d : shape) e.tensor.shape.push_back(std::size_t(unsigned_of(d, where, "shape")));
    const auto& offsets = field(info, "data_offsets", where);
    if (!offsets.is_array() || offsets.size() != 2) throw io_error(where + ": \"data_offsets\" is not [begin, end]");
    e.begin = unsigned_of(offsets[0], where, "data_offsets");
    e.end = unsigned_of(offsets[1], where, "data_offsets");
    return e;
}

std::map<std::string, std::string> metadata_of(const nlohmann::json& j, const std::string& source) {
    std::map<std::string, std::string> out;
    if (j.is_null()) return out;
    if (!j.is_object()) throw io_error(source + ": \"__metadata__\" is not an object of strings");
    for (const auto& [key, value] : j.items()) {
        if (!value.is_string()) throw io_error(source + ": \"__metadata__\" " + in_quotes(key) + " is not a string");
        out.emplace(key, value.get<std::string>());
    }
    return out;
}

std::uint16_t load_u16(const std::byte* p) {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

NpyArray widened(const std::string& name, const SafetensorsTensor& t, const std::string& source) {
    NpyArray a;
    a.source = source + ":" + name;
    a.shape = t.shape;
    const std::size_t n = t.size();
    const std::byte* src = t.bytes.data();
    const auto fill = [&](Dtype dtype, auto convert) {
        using Out = decltype(convert(std::size_t(0)));
        a.dtype = dtype;
        a.bytes.resize(n * sizeof(Out));
        for (std::size_t i = 0; i < n; ++i) {
            const Out v = convert(i);
            std::memcpy(a.bytes.data() + i * sizeof(Out), &v, sizeof(Out));
        }
    };
    switch (t.dtype) {
        case SafetensorsDtype::F64: a.dtype = Dtype::float64, a.bytes.assign(t.bytes.begin(), t.bytes.end()); break;
        case SafetensorsDtype::F32: a.dtype = Dtype::float32, a.bytes.assign(t.bytes.begin(), t.bytes.end()); break;
        case SafetensorsDtype::I64: a.dtype = Dtype::int64, a.bytes.assign(t.bytes.begin(), t.bytes.end()); break;
        case SafetensorsDtype::BOOL: a.dtype = Dtype::bool8, a.bytes.assign(t.bytes.begin(), t.bytes.end()); break;
        case SafetensorsDtype::F16: fill(Dtype::float32, [&](std::size_t i) { return half_to_float(load_u16(src + 2 * i)); }); break;
        case SafetensorsDtype::BF16:
            fill(Dtype::float32, [&](std::size_t i) { return bfloat16_to_float(load_u16(src + 2 * i)); });
            break;
        case SafetensorsDtype::I32:
            fill(Dtype::int64, [&](std::size_t i) {
                std::int32_t v;
                std::memcpy(&v, src + 4 * i, 4);
                return std::int64_t(v);
            });
            break;
        case SafetensorsDtype::U8: fill(Dtype::int64, [&](std::size_t i) { return std::int64_t(std::uint8_t(src[i])); }); break;
    }
    return a;
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDtype d) {
    switch (d) {
        case SafetensorsDtype::F64: return "F64";
        case SafetensorsDtype::F32: return "F32";
        case SafetensorsDtype::F16: return "F16";
        case SafetensorsDtype::BF16: return "BF16";
        case SafetensorsDtype::I64: return "I64";
        case SafetensorsDtype::I32: return "I32";
        case SafetensorsDtype::U8: return "U8";
        case SafetensorsDtype::BOOL: return "BOOL";
    }
    return "?";
}

std::size_t safetensors_itemsize(SafetensorsDtype d) {
    switch (d) {
        case SafetensorsDtype::F64: case SafetensorsDtype::I64: return 8;
        case SafetensorsDtype::F32: case SafetensorsDtype::I32: return 4;
        case SafetensorsDtype::F16: case SafetensorsDtype::BF16: return 2;
        case SafetensorsDtype::U8: case SafetensorsDtype::BOOL: return 1;
    }
    return 0;
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
    MappedFile file = MappedFile::open(path);
    SafetensorsFile st = parse(file.bytes(), path.string());
    st.file_ = std::move(file);
    return st;
}

SafetensorsFile SafetensorsFile::parse(std::span<const std::byte> image, const std::string& source) {
    const std::size_t size = image.size();
    if (size < 8)
        throw io_error(source + ": truncated: " + std::to_string(size) +
                       " bytes, a safetensors file starts with an 8-byte header length");
    std::uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | std::uint64_t(image[std::size_t(k)]);
    if (n > max_header_size)
        throw io_error(source + ": header length " + std::to_string(n) + " is over the limit of " +
                       std::to_string(max_header_size) + " bytes");
    if (n > size - 8)
        throw io_error(source + ": header length " + std::to_string(n) + " is past the end of the file (" +
                       std::to_string(size - 8) + " bytes after the length)");
    const char* text = reinterpret_cast<const char*>(image.data() + 8);
    const nlohmann::json header = parse_header(text, text + n, source);

    SafetensorsFile st;
    st.source_ = source;
    std::vector<Entry> entries;
    for (const auto& [name, info] : header.items()) {
        if (name == "__metadata__") st.metadata_ = metadata_of(info, source);
        else entries.push_back(entry_of(name, info, source));
    }
    // In the order of their offsets, each tensor starts where the one before ends (the first at 0)
    // and spans exactly its shape's bytes; the last ends at the end of the file.
    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return std::pair(a.begin, a.end) < std::pair(b.begin, b.end); });
    const std::uint64_t data_size = size - 8 - n;
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
        Entry& e = entries[i];
        const std::string where = source + ": tensor " + in_quotes(e.name) + ": data_offsets [" + std::to_string(e.begin) +
                                  ", " + std::to_string(e.end) + ")";
        if (e.end < e.begin) throw io_error(where + " end before they begin");
        if (e.begin < at)
            throw io_error(where + " overlap tensor " + in_quotes(entries[i - 1].name) + ", which ends at " + std::to_string(at));
        if (e.begin > at)
            throw io_error(where + " leave a gap of " + std::to_string(e.begin - at) + " bytes after " +
                           (i ? "tensor " + in_quotes(entries[i - 1].name) : std::string("the header")));
        std::uint64_t count = 1, bytes = 0;
        for (auto d : e.tensor.shape)
            if (__builtin_mul_overflow(count, std::uint64_t(d), &count))
                throw io_error(where + ": shape " + shape_str(e.tensor.shape) + " has too many elements");
        if (__builtin_mul_overflow(count, std::uint64_t(safetensors_itemsize(e.tensor.dtype)), &bytes) ||
            count > std::uint64_t(std::numeric_limits<std::ptrdiff_t>::max()) / 8)
            throw io_error(where + ": shape " + shape_str(e.tensor.shape) + " has too many elements");
        if (e.end - e.begin != bytes)
            throw io_error(where + " hold " + std::to_string(e.end - e.begin) + " bytes, shape " +
                           shape_str(e.tensor.shape) + " of " + safetensors_dtype_name(e.tensor.dtype) + " needs " +
                           std::to_string(bytes));
        if (e.end > data_size)
            throw io_error(where + " end past the end of the file (" + std::to_string(data_size) +
                           " bytes of data after the header)");
        e.tensor.bytes = image.subspan(std::size_t(8 + n + e.begin), std::size_t(bytes));
        at = e.end;
    }
    if (at != data_size)
        throw io_error(source + ": the tensors cover " + std::to_string(at) + " bytes of data, the file holds " +
                       std::to_string(data_size) + " after the header");
    for (auto& e : entries) st.tensors_.emplace(std::move(e.name), std::move(e.tensor));
    return st;
}

NpyArray SafetensorsFile::array(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw io_error(source_ + ": has no tensor " + in_quotes(name));
    return widened(name, it->second, source_);
}

std::map<std::string, NpyArray> SafetensorsFile::arrays() const {
    std::map<std::string, NpyArray> out;
    for (const auto& [name, t] : tensors_) out.emplace(name, widened(name, t, source_));
    return out;
}

std::vector<std::byte> encode_safetensors(const std::map<std::string, NpyArray>& arrays,
                                          const SafetensorsWriteOptions& opts, const std::string& source) {
    if (opts.float_dtype && *opts.float_dtype != SafetensorsDtype::F64 && *opts.float_dtype != SafetensorsDtype::F32 &&
        *opts.float_dtype != SafetensorsDtype::F16 && *opts.float_dtype != SafetensorsDtype::BF16)
        throw value_error(source + ": float_dtype must be F64, F32, F16 or BF16, got " +
                          safetensors_dtype_name(*opts.float_dtype));
    struct Item {
        const std::string* name;
        const NpyArray* array;
        SafetensorsDtype dtype;
    };
    std::vector<Item> items;
    for (const auto& [name, a] : arrays) {
        if (name == "__metadata__") throw value_error(source + ": a tensor cannot be named __metadata__");
        SafetensorsDtype d = a.dtype == Dtype::float64 ? SafetensorsDtype::F64
                             : a.dtype == Dtype::float32 ? SafetensorsDtype::F32
                             : a.dtype == Dtype::int64   ? SafetensorsDtype::I64
                                                         : SafetensorsDtype::BOOL;
        if (a.is_float() && opts.float_dtype) d = *opts.float_dtype;
        if (a.bytes.size() != a.size() * itemsize(a.dtype))
            throw value_error(source + ": tensor " + in_quotes(name) + " holds " + std::to_string(a.bytes.size()) +
                              " bytes, its shape " + shape_str(a.shape) + " needs " +
                              std::to_string(a.size() * itemsize(a.dtype)));
        items.push_back({&name, &a, d});
    }
    std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
        return safetensors_itemsize(a.dtype) > safetensors_itemsize(b.dtype);  // names stay in order within a size
    });
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!opts.metadata.empty()) header["__metadata__"] = opts.metadata;
    std::size_t offset = 0;
    for (const auto& it : items) {
        const std::size_t bytes = it.array->size() * safetensors_itemsize(it.dtype);
        header[*it.name] = {{"dtype", safetensors_dtype_name(it.dtype)},
                            {"shape", it.array->shape},
                            {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = json_text(header);
    text.append((8 - text.size() % 8) % 8, ' ');
    if (text.size() > max_header_size)
        throw value_error(source + ": the header would take " + std::to_string(text.size()) + " bytes, over the limit of " +
                          std::to_string(max_header_size));
    std::vector<std::byte> out(8 + text.size() + offset);
    for (int k = 0; k < 8; ++k) out[std::size_t(k)] = std::byte((std::uint64_t(text.size()) >> (8 * k)) & 0xff);
    std::memcpy(out.data() + 8, text.data(), text.size());
    std::byte* dst = out.data() + 8 + text.size();
    for (const auto& it : items) {
        const NpyArray& a = *it.array;
        const std::size_t n = a.size();
        const auto value = [&](std::size_t i) {  // element i as a float
            if (a.dtype == Dtype::float32) {
                float v;
                std::memcpy(&v, a.bytes.data() + 4 * i, 4);
                return v;
            }
            double v;
            std::memcpy(&v, a.bytes.data() + 8 * i, 8);
            return float(v);
        };
        if (it.dtype == SafetensorsDtype::F16 || it.dtype == SafetensorsDtype::BF16) {
            for (std::size_t i = 0; i < n; ++i) {
                const std::uint16_t h = it.dtype == SafetensorsDtype::F16 ? float_to_half(value(i)) : float_to_bfloat16(value(i));
                std::memcpy(dst + 2 * i, &h, 2);
            }
        } else if (a.is_float() && safetensors_itemsize(it.dtype) != itemsize(a.dtype)) {
            for (std::size_t i = 0; i < n; ++i) {
                if (it.dtype == SafetensorsDtype::F32) {
                    const float v = value(i);
                    std::memcpy(dst + 4 * i, &v, 4);
                } else {
                    float v;
                    std::memcpy(&v, a.bytes.data() + 4 * i, 4);
                    const double w = v;
                    std::memcpy(dst + 8 * i, &w, 8);
                }
            }
        } else if (a.dtype == Dtype::bool8) {
            for (std::size_t i = 0; i < n; ++i) dst[i] = std::byte(a.bytes[i] != std::byte{0} ? 1 : 0);
        } else if (!a.bytes.empty()) {
            std::memcpy(dst, a.bytes.data(), a.bytes.size());
        }
        dst += n * safetensors_itemsize(it.dtype);
    }
    return out;
}

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, NpyArray>& arrays,
                       const SafetensorsWriteOptions& opts) {
    const auto image = encode_safetensors(arrays, opts, path.string());
    write_file_atomic(path, image.data(), image.size());
}

float half_to_float(std::uint16_t h) {
    const std::uint32_t sign = std::uint32_t(h & 0x8000) << 16, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa · 2^-24, exact in float
        const float v = std::ldexp(float(mantissa), -24);
        return sign ? -v : v;
    }
    const std::uint32_t bits = exponent == 0x1f ? sign | 0x7f800000u | (mantissa << 13)  // inf, NaN
                                                : sign | ((exponent + 112) << 23) | (mantissa << 13);
    return std::bit_cast<float>(bits);
}

float bfloat16_to_float(std::uint16_t b) { return std::bit_cast<float>(std::uint32_t(b) << 16); }

std::uint16_t float_to_half(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f), sign = (x >> 16) & 0x8000, a = x & 0x7fffffff;
    if (a > 0x7f800000) return std::uint16_t(sign | 0x7e00);                 // NaN (quiet)
    if (a >= 0x477ff000) return std::uint16_t(sign | 0x7c00);                // inf, or rounds past 65504
    if (a >= 0x38800000)                                                     // a normal half: rebias, round at bit 13
        return std::uint16_t(sign | ((a + 0xfff + ((a >> 13) & 1) - 0x38000000) >> 13));
    if (a < 0x33000000) return std::uint16_t(sign);                          // below 2^-25: zero
    const std::uint32_t m = (a & 0x7fffff) | 0x800000, shift = 126 - (a >> 23);  // subnormal: round(f · 2^24)
    const std::uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    std::uint32_t q = m >> shift;
    q += rest > half || (rest == half && (q & 1));
    return std::uint16_t(sign | q);
}

std::uint16_t float_to_bfloat16(float f) {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffff) > 0x7f800000) return std::uint16_t((x >> 16) | 0x40);  // NaN stays NaN (quiet)
    return std::uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace xgrad::io
