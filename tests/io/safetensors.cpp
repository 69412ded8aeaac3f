// .safetensors: the reference implementation's own serialization vectors (huggingface/safetensors,
// safetensors/src/tensor.rs tests), IEEE half and bfloat16 bit patterns, state dicts by extension,
// and every check of the header provoked.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "io_test_util.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/xgrad.hpp"

namespace test_io_safetensors {

using namespace xgrad;
using xgrad::testing::io_error_of;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

// A file's image: the header's length, the header as given (no padding) and the data.
std::string image(const std::string& header, const std::string& data = "") {
    std::string out(8, '\0');
    for (int k = 0; k < 8; ++k) out[std::size_t(k)] = char((std::uint64_t(header.size()) >> (8 * k)) & 0xff);
    return out + header + data;
}
std::string bytes_of(std::initializer_list<int> v) {
    std::string s;
    for (int b : v) s += char(b);
    return s;
}
template <class T>
std::string le(std::initializer_list<T> values) {
    std::string s;
    for (T v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
    return s;
}
std::span<const std::byte> span_of(const std::string& s) {
    return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}
std::string as_string(const std::vector<std::byte>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size()); }

io::NpyArray f32(std::vector<std::size_t> shape, std::vector<float> values) {
    io::NpyArray a;
    a.dtype = io::Dtype::float32, a.shape = std::move(shape);
    a.bytes.resize(values.size() * 4);
    std::memcpy(a.bytes.data(), values.data(), a.bytes.size());
    return a;
}

// Parsing `img` throws io_error naming the source and containing `why`.
void expect_bad(const std::string& img, const std::string& why) {
    const std::string msg = io_error_of([&] { io::SafetensorsFile::parse(span_of(img), "bad.safetensors"); });
    INFO(msg);
    CHECK(msg.starts_with("bad.safetensors: "));
    CHECK(msg.find(why) != std::string::npos);
}

template <Real T>
struct Net {
    BOOST_HANA_DEFINE_STRUCT(Net, (nn::Linear<T>, fc1), (nn::Linear<T>, fc2));
};

}  // namespace

TEST_CASE("safetensors: writes the reference's bytes") {
    // test_serialization: "attn.0", F32, shape (1, 2, 3), values 0..5; the header is 64 bytes, no padding
    const std::string attn0 =
        bytes_of({64, 0, 0, 0, 0, 0, 0, 0}) + R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" +
        le<float>({0, 1, 2, 3, 4, 5});
    CHECK(as_string(io::encode_safetensors({{"attn.0", f32({1, 2, 3}, {0, 1, 2, 3, 4, 5})}})) == attn0);
    // test_serialization_forced_alignement: padded with 7 spaces to 72 bytes
    const std::string padded = bytes_of({72, 0, 0, 0, 0, 0, 0, 0}) +
                               R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" + "       " +
                               le<float>({0, 1, 2, 3, 4, 5});
    CHECK(as_string(io::encode_safetensors({{"attn0", f32({1, 1, 2, 3}, {0, 1, 2, 3, 4, 5})}})) == padded);
    // test_empty: no tensors, then with metadata
    CHECK(as_string(io::encode_safetensors({})) == bytes_of({8, 0, 0, 0, 0, 0, 0, 0}) + "{}      ");
    CHECK(as_string(io::encode_safetensors({}, {.metadata = {{"framework", "pt"}}})) ==
          bytes_of({40, 0, 0, 0, 0, 0, 0, 0}) + R"({"__metadata__":{"framework":"pt"}})" + "     ");

    const auto st = io::SafetensorsFile::parse(span_of(attn0), "attn.safetensors");
    REQUIRE(st.tensors().size() == 1);
    const auto a = st.array("attn.0");
    CHECK(a.source == "attn.safetensors:attn.0");
    CHECK(a.as<float, 3>() == xt::xtensor<float, 3>{{{0, 1, 2}, {3, 4, 5}}});
    CHECK(io_error_of([&] { st.array("attn.1"); }) == "attn.safetensors: has no tensor 'attn.1'");
}

TEST_CASE("safetensors: every dtype read, in any order of the header") {
    // data: F64 [0.5] | F16 [1, -2, 65504, 2^-24, inf, 0.1] | BF16 [1, -3, 0.1] | I32 [-5, 7] | U8 [0, 255]
    //       | BOOL [0, 1] | I64 [-9]
    const std::string data = le<double>({0.5}) + le<std::uint16_t>({0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x2E66}) +
                             le<std::uint16_t>({0x3F80, 0xC040, 0x3DCD}) + le<std::int32_t>({-5, 7}) +
                             bytes_of({0, 255, 0, 1}) + le<std::int64_t>({-9});
    const std::string header =
        R"({"i64":{"dtype":"I64","shape":[1],"data_offsets":[36,44]},)"
        R"("f64":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"f16":{"dtype":"F16","shape":[2,3],"data_offsets":[8,20]},)"
        R"("bf16":{"dtype":"BF16","shape":[3],"data_offsets":[20,26]},"i32":{"dtype":"I32","shape":[2],"data_offsets":[26,34]},)"
        R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[34,36]},"bool":{"dtype":"BOOL","shape":[2],"data_offsets":[36,38]}})";
    // the offsets of "i64" and "bool" as written overlap; put them right first
    std::string fixed = header;
    fixed.replace(fixed.find("[36,44]"), 7, "[38,46]");
    const std::string img = image(fixed, data);
    const auto st = io::SafetensorsFile::parse(span_of(img), "all.safetensors");
    CHECK(st.tensors().at("f16").dtype == io::SafetensorsDtype::F16);
    CHECK(st.array("f64").as<double, 0>()() == 0.5);
    const auto h = st.array("f16").as<float, 2>();
    CHECK(h(0, 0) == 1.0f);
    CHECK(h(0, 1) == -2.0f);
    CHECK(h(0, 2) == 65504.0f);
    CHECK(h(1, 0) == std::ldexp(1.0f, -24));
    CHECK(h(1, 1) == std::numeric_limits<float>::infinity());
    CHECK(h(1, 2) == 0.0999755859375f);
    CHECK(st.array("bf16").as<float, 1>() == xt::xtensor<float, 1>{1.0f, -3.0f, 0.10009765625f});
    CHECK(st.array("i32").as<std::int64_t, 1>() == xt::xtensor<std::int64_t, 1>{-5, 7});
    CHECK(st.array("u8").as<std::int64_t, 1>() == xt::xtensor<std::int64_t, 1>{0, 255});
    CHECK(st.array("bool").as<bool, 1>() == xt::xtensor<bool, 1>{false, true});
    CHECK(st.array("i64").as<std::int64_t, 1>()(0) == -9);
    CHECK(std::string(io::safetensors_dtype_name(st.tensors().at("bf16").dtype)) == "BF16");
    // the overlapping header is refused
    expect_bad(image(header, data), "tensor 'i64': data_offsets [36, 44) overlap tensor 'bool', which ends at 38");
}

TEST_CASE("safetensors: half and bfloat16 rounding to nearest even") {
    const float one = 1.0f;
    CHECK(io::float_to_half(one) == 0x3C00);
    CHECK(io::float_to_half(-2.0f) == 0xC000);
    CHECK(io::float_to_half(1 + std::ldexp(1.0f, -11)) == 0x3C00);      // a tie: to the even 1.0
    CHECK(io::float_to_half(1 + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // a tie: to the even 1 + 2^-9
    CHECK(io::float_to_half(65519.0f) == 0x7BFF);
    CHECK(io::float_to_half(65520.0f) == 0x7C00);                       // rounds past 65504: inf
    CHECK(io::float_to_half(std::ldexp(1.0f, -14)) == 0x0400);          // the smallest normal
    CHECK(io::float_to_half(std::ldexp(1.0f, -25)) == 0x0000);          // a tie between 0 and 2^-24
    CHECK(io::float_to_half(3 * std::ldexp(1.0f, -25)) == 0x0002);      // 1.5 · 2^-24: to 2 · 2^-24
    CHECK(io::float_to_half(-std::ldexp(1.0f, -24)) == 0x8001);
    CHECK(io::float_to_half(0.1f) == 0x2E66);
    CHECK(std::isnan(io::half_to_float(io::float_to_half(std::nanf("")))));
    CHECK(io::float_to_bfloat16(one) == 0x3F80);
    CHECK(io::float_to_bfloat16(1 + std::ldexp(1.0f, -8)) == 0x3F80);      // a tie: to the even 1.0
    CHECK(io::float_to_bfloat16(1 + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // a tie: up to the even
    CHECK(io::float_to_bfloat16(0.1f) == 0x3DCD);
    CHECK(std::isnan(io::bfloat16_to_float(io::float_to_bfloat16(std::nanf("")))));
    for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every finite half survives float and back
        if ((h & 0x7C00) == 0x7C00 && (h & 0x3FF)) continue;
        REQUIRE(io::float_to_half(io::half_to_float(std::uint16_t(h))) == h);
    }
}

TEST_CASE("safetensors: state dicts by extension, any float dtype written") {
    ScratchDir dir;
    Generator gen(3);
    Net<float> a{nn::Linear<float>(3, 4, gen), nn::Linear<float>(4, 2, gen)};
    Net<float> b{nn::Linear<float>(3, 4, gen), nn::Linear<float>(4, 2, gen)};
    const fs::path file = dir.path / "net.safetensors";
    io::save_state_dict(a, file);
    const auto st = io::SafetensorsFile::open(file);
    CHECK(st.tensors().size() == 4);
    CHECK(st.tensors().at("fc1.weight").shape == std::vector<std::size_t>{4, 3});
    io::load_state_dict(b, file);
    CHECK(b.fc1.weight.value() == a.fc1.weight.value());
    CHECK(b.fc2.bias.value() == a.fc2.bias.value());
    Net<double> d{nn::Linear<double>(3, 4, gen), nn::Linear<double>(4, 2, gen)};
    CHECK(io_error_of([&] { io::load_state_dict(d, file); }).find("set convert_dtype") != std::string::npos);
    io::load_state_dict(d, file, {.convert_dtype = true});
    CHECK(d.fc1.weight.value() == xt::cast<double>(a.fc1.weight.value()));

    // BF16: each value rounded as float_to_bfloat16 rounds it; F64 of a float model: exact
    const fs::path half = dir.path / "net-bf16.safetensors";
    io::write_safetensors(half, io::state_dict(a), {.metadata = {{"format", "pt"}}, .float_dtype = io::SafetensorsDtype::BF16});
    const auto hs = io::SafetensorsFile::open(half);
    CHECK(hs.metadata().at("format") == "pt");
    CHECK(hs.tensors().at("fc1.weight").dtype == io::SafetensorsDtype::BF16);
    io::load_state_dict(b, half);
    for (std::size_t i = 0; i < a.fc1.weight.size(); ++i)
        CHECK(b.fc1.weight.value().data()[i] == io::bfloat16_to_float(io::float_to_bfloat16(a.fc1.weight.value().data()[i])));
    io::write_safetensors(dir.path / "net64.safetensors", io::state_dict(a), {.float_dtype = io::SafetensorsDtype::F64});
    CHECK(io::SafetensorsFile::open(dir.path / "net64.safetensors").tensors().at("fc2.bias").dtype == io::SafetensorsDtype::F64);
    io::load_state_dict(b, dir.path / "net64.safetensors", {.convert_dtype = true});
    CHECK(b.fc1.weight.value() == a.fc1.weight.value());
    CHECK_THROWS_WITH_AS(io::encode_safetensors({}, {.float_dtype = io::SafetensorsDtype::I32}),
                         "safetensors: float_dtype must be F64, F32, F16 or BF16, got I32", value_error);
}

TEST_CASE("safetensors: bad files, each check named") {
    const std::string t = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    const std::string eight(8, '\0');
    expect_bad(std::string("\x05\0\0", 3), "truncated: 3 bytes, a safetensors file starts with an 8-byte header length");
    expect_bad(bytes_of({0x40, 0, 0, 0, 0, 0, 0, 0}) + "{}", "header length 64 is past the end of the file (2 bytes after the length)");
    expect_bad(bytes_of({0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0}), "header length 100000001 is over the limit of 100000000 bytes");
    expect_bad(bytes_of({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "header length 18446744073709551615 is over the limit");
    expect_bad(image("{\"t\":"), "the header is not valid JSON");
    expect_bad(image("[1, 2]"), "the header is not a JSON object");
    expect_bad(image("{\"t\": {\"dtype\": \"\xff\"}}"), "the header is not valid JSON");  // not UTF-8
    expect_bad(image(R"({"t":{"dtype":"F17","shape":[2],"data_offsets":[0,8]}})", eight),
               "tensor 't': dtype 'F17' is unknown or not supported (supported: F64, F32, F16, BF16, I64, I32, U8, BOOL)");
    expect_bad(image(R"({"t":{"dtype":"I8","shape":[8],"data_offsets":[0,8]}})", eight), "tensor 't': dtype 'I8' is unknown");
    expect_bad(image(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", eight), "tensor 't': has no \"shape\"");
    expect_bad(image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
               "tensor 't': \"shape\" holds -2, not a non-negative integer");
    expect_bad(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", eight),
               "tensor 't': \"data_offsets\" is not [begin, end]");
    expect_bad(image(R"({"t":7})", eight), "tensor 't': its entry is not a JSON object");
    expect_bad(image("{" + t + "," + t + "}", eight), "the header names 't' twice");
    expect_bad(image(R"({"t":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,8]}})", eight),
               "the header names 'dtype' twice");
    expect_bad(image(R"({"__metadata__":{"format":1},)" + t + "}", eight), "\"__metadata__\" 'format' is not a string");
    // offsets: overlap, gap, reversed, wrong length, past the end, data left over
    const std::string u = R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})";
    expect_bad(image("{" + t + "," + u + "}", std::string(12, '\0')), "tensor 'u': data_offsets [4, 12) overlap tensor 't', which ends at 8");
    const std::string v = R"("v":{"dtype":"F32","shape":[1],"data_offsets":[12,16]})";
    expect_bad(image("{" + t + "," + v + "}", std::string(16, '\0')), "tensor 'v': data_offsets [12, 16) leave a gap of 4 bytes after tensor 't'");
    expect_bad(image(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight), "leave a gap of 4 bytes after the header");
    expect_bad(image("{" + t + R"(,"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", eight),
               "tensor 'w': data_offsets [8, 4) end before they begin");
    expect_bad(image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
               "tensor 't': data_offsets [0, 8) hold 8 bytes, shape (3,) of F32 needs 12");
    expect_bad(image("{" + t + "}", "abc"), "tensor 't': data_offsets [0, 8) end past the end of the file (3 bytes of data after the header)");
    expect_bad(image("{" + t + "}", std::string(9, '\0')), "the tensors cover 8 bytes of data, the file holds 9 after the header");
    expect_bad(image(R"({"t":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", eight),
               "shape (4294967296, 4294967296) has too many elements");
    // a file: the message names it; a good file with nothing after its header reads
    ScratchDir dir;
    const fs::path p = dir.path / "cut.safetensors";
    write_bytes(p, image("{" + t + "}", "abcd"));
    CHECK(io_error_of([&] { io::read_safetensors(p); }).starts_with(p.string() + ": tensor 't'"));
    CHECK(io_error_of([&] { io::read_safetensors(dir.path / "none.safetensors"); }).starts_with((dir.path / "none.safetensors").string() + ": cannot open"));
    write_bytes(p, image("{" + t + "}", le<float>({1.5f, -2.0f})));
    CHECK(io::read_safetensors(p).at("t").as<float, 1>() == xt::xtensor<float, 1>{1.5f, -2.0f});
}

}  // namespace test_io_safetensors
