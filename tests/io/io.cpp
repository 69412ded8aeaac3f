// npy / npz / state dict round trips, numpy-written fixtures, every bad-input path.
// (`xgrad attention`'s config: tests/cli/json_config.cpp; its end-to-end cases: tests/cli/attention_tool.cpp.)
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "io_test_util.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/io/npz.hpp"
#include "xgrad/io/state_dict.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/xgrad.hpp"

// Each test file in a namespace of its own: unity builds (scripts/sanitize) compile several in one unit.
namespace test_io_io {

using namespace xgrad;
using xgrad::testing::io_error_of;
using xgrad::testing::ScratchDir;
using xgrad::testing::write_bytes;
namespace fs = std::filesystem;

namespace {

const fs::path npy_dir = fs::path(XGRAD_FIXTURES) / "io" / "npy";
const fs::path npz_dir = fs::path(XGRAD_FIXTURES) / "io" / "npz";

// A .npy image with the given header text (padded as numpy does) and data bytes.
std::string npy_image(const std::string& header, const std::string& data, int major = 1) {
    std::string h = header;
    const std::size_t prefix = major == 1 ? 10 : 12;
    while ((prefix + h.size() + 1) % 64) h += ' ';
    h += '\n';
    std::string out = "\x93NUMPY";
    out += char(major), out += char(0);
    for (std::size_t k = 0; k < prefix - 8; ++k) out += char((h.size() >> (8 * k)) & 0xff);
    return out + h + data;
}

void expect_bad_npy(const ScratchDir& dir, const std::string& name, const std::string& image, const std::string& why) {
    const fs::path p = dir.path / name;
    write_bytes(p, image);
    const std::string msg = io_error_of([&] { io::read_npy(p); });
    INFO(msg);
    CHECK(msg.find(p.string()) != std::string::npos);
    CHECK(msg.find(why) != std::string::npos);
}

template <Real T>
struct Net {
    BOOST_HANA_DEFINE_STRUCT(Net, (nn::Linear<T>, fc1), (nn::Linear<T>, fc2));
};

template <Real T>
Net<T> make_net() {
    Generator gen(7);
    Net<T> n;
    n.fc1 = nn::Linear<T>(3, 4, gen);
    n.fc2 = nn::Linear<T>(4, 2, gen);
    return n;
}

}  // namespace

TEST_CASE("npy: reads what numpy wrote, every dtype and format version") {
    auto f4 = io::read_npy(npy_dir / "f4.npy");
    CHECK(f4.dtype == io::Dtype::float32);
    const auto a = f4.as<float, 2>();
    CHECK(a.shape()[0] == 2);
    CHECK(a(0, 0) == 1.5f);
    CHECK(a(1, 2) == -6.0f);
    const auto f8 = io::read_npy(npy_dir / "f8.npy").as<double, 1>();
    CHECK(f8(0) == 0.1);
    CHECK(f8(2) == 1e300);
    const auto b = io::read_npy(npy_dir / "b1.npy").as<bool, 2>();
    CHECK(b(0, 0));
    CHECK_FALSE(b(0, 1));
    CHECK(b(1, 1));
    const auto i8 = io::read_npy(npy_dir / "i8.npy").as<std::int64_t, 1>();
    CHECK(i8(0) == -3);
    CHECK(i8(3) == (std::int64_t(1) << 40));
    const auto i4 = io::read_npy(npy_dir / "i4.npy");  // int32 is widened
    CHECK(i4.dtype == io::Dtype::int64);
    const auto w = i4.as<std::int64_t, 2>();
    CHECK(w(1, 0) == 2147483647);
    CHECK(w(1, 1) == -2147483648LL);
    const auto s = io::read_npy(npy_dir / "scalar.npy");
    CHECK(s.shape.empty());
    CHECK(s.as<double, 0>()() == 4.5);
    const auto e = io::read_npy(npy_dir / "empty.npy");
    CHECK(e.shape == std::vector<std::size_t>{0, 3});
    for (const char* v : {"v2.npy", "v3.npy"}) {
        const auto x = io::read_npy(npy_dir / v).as<double, 2>();
        CHECK(x(1, 2) == 5.0);
        CHECK(x(0, 1) == 1.0);
    }
}

TEST_CASE("npy: typed access checks rank and dtype, converts floats only when asked") {
    const auto f4 = io::read_npy(npy_dir / "f4.npy");
    std::string msg = io_error_of([&] { f4.as<float, 3>(); });
    CHECK(msg.find("f4.npy") != std::string::npos);
    CHECK(msg.find("(2, 3)") != std::string::npos);
    msg = io_error_of([&] { f4.as<double, 2>(); });
    CHECK(msg.find("float32") != std::string::npos);
    CHECK(f4.as<double, 2>(true)(1, 0) == 0.25);
    CHECK(io::read_npy(npy_dir / "f8.npy").as<float, 1>(true)(1) == -2.5f);
    const auto b = io::read_npy(npy_dir / "b1.npy");
    CHECK(io_error_of([&] { b.as<double, 2>(true); }).find("has dtype bool") != std::string::npos);  // never converted
    CHECK(b.as_xarray<bool>().dimension() == 2);
}

TEST_CASE("npy: round trip of every dtype and rank, atomically") {
    ScratchDir dir;
    xt::xtensor<float, 2> f = {{1.25f, -3.0f, 7.5f}, {0.0f, 1e-30f, -2.0f}};
    xt::xtensor<double, 3> d = xt::reshape_view(xt::arange<double>(24) / 7.0, {2, 3, 4});
    xt::xtensor<bool, 1> b = {true, false, true, true, false};
    xt::xtensor<std::int64_t, 2> i = {{-1, 1LL << 50}, {3, 4}};
    xt::xtensor<double, 0> s = 2.5;
    io::write_npy(dir.path / "f.npy", f);
    io::write_npy(dir.path / "d.npy", d);
    io::write_npy(dir.path / "b.npy", b);
    io::write_npy(dir.path / "i.npy", i);
    io::write_npy(dir.path / "s.npy", s);
    CHECK(io::read_npy(dir.path / "f.npy").as<float, 2>() == f);
    CHECK(io::read_npy(dir.path / "d.npy").as<double, 3>() == d);
    CHECK(io::read_npy(dir.path / "b.npy").as<bool, 1>() == b);
    CHECK(io::read_npy(dir.path / "i.npy").as<std::int64_t, 2>() == i);
    CHECK(io::read_npy(dir.path / "s.npy").as<double, 0>()() == 2.5);
    // the header is numpy's: format 1.0, 64-byte aligned, '<f4' and C order
    const std::string img = xgrad::testing::read_bytes(dir.path / "f.npy");
    CHECK(img.substr(0, 8) == std::string("\x93NUMPY\x01\x00", 8));
    CHECK((img.size() - 24) % 64 == 0);
    CHECK(img.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") == 10);
    // overwriting works and leaves no temporary files behind
    io::write_npy(dir.path / "f.npy", b);
    CHECK(io::read_npy(dir.path / "f.npy").dtype == io::Dtype::bool8);
    CHECK(dir.entries() == std::vector<std::string>{"b.npy", "d.npy", "f.npy", "i.npy", "s.npy"});
    // a write that cannot happen throws, naming the file, and leaves nothing
    const std::string msg = io_error_of([&] { io::write_npy(dir.path / "missing_dir" / "x.npy", f); });
    CHECK(msg.find("missing_dir/x.npy") != std::string::npos);
    CHECK(dir.entries().size() == 5);
}

TEST_CASE("npy: bad input is an io_error naming the file and the problem") {
    ScratchDir dir;
    const std::string f8x2(16, '\0');
    const std::string good = "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }";
    expect_bad_npy(dir, "magic.npy", "\x93NUMPZ\x01\x00" + std::string(100, ' '), "wrong magic");
    expect_bad_npy(dir, "short.npy", "\x93NU", "wrong magic");
    expect_bad_npy(dir, "version.npy", npy_image(good, f8x2, 4), "version 4.0");
    expect_bad_npy(dir, "cut_len.npy", std::string("\x93NUMPY\x01\x00\x40", 9), "truncated header");
    expect_bad_npy(dir, "cut_header.npy", npy_image(good, "").substr(0, 40), "truncated header");
    expect_bad_npy(dir, "cut_data.npy", npy_image(good, f8x2.substr(0, 12)), "truncated data");
    expect_bad_npy(dir, "extra_data.npy", npy_image(good, f8x2 + "x"), "unexpected bytes");
    expect_bad_npy(dir, "not_dict.npy", npy_image("[1, 2, 3]", f8x2), "not a valid npy header dict");
    expect_bad_npy(dir, "no_shape.npy", npy_image("{'descr': '<f8', 'fortran_order': False}", f8x2), "'shape'");
    expect_bad_npy(dir, "bad_shape.npy", npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, -1), }", f8x2),
                   "non-negative integer");
    expect_bad_npy(dir, "extra_key.npy",
                   npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), 'x': 1}", f8x2), "'x'");
    expect_bad_npy(dir, "overflow.npy",
                   npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16), }", f8x2),
                   "too many elements");
    // numpy's element limit holds also when a zero dim leaves nothing to store (xtensor's strides must fit)
    expect_bad_npy(dir, "empty_overflow.npy",
                   npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }", ""),
                   "too many elements");
    expect_bad_npy(dir, "huge_dim.npy",
                   npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999,), }", f8x2),
                   "dimension too large");
    // a shape far beyond the bytes present is refused before anything is allocated
    expect_bad_npy(dir, "lying_shape.npy",
                   npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }", f8x2),
                   "needs 8000000000000 bytes, the file holds 16");
    expect_bad_npy(dir, "structured.npy",
                   npy_image("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2,), }", f8x2), "structured");
    expect_bad_npy(dir, "u8.npy", npy_image("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }", f8x2),
                   "unsupported dtype '<u8'");
    // numpy-written files numpy can read but we do not support
    for (auto [file, why] : {std::pair{"fortran.npy", "fortran_order"}, std::pair{"big_endian.npy", "big-endian"},
                             std::pair{"f2.npy", "unsupported dtype '<f2'"}}) {
        const std::string msg = io_error_of([&] { io::read_npy(npy_dir / file); });
        INFO(msg);
        CHECK(msg.find(file) != std::string::npos);
        CHECK(msg.find(why) != std::string::npos);
    }
    CHECK(io_error_of([&] { io::read_npy(dir.path / "absent.npy"); }).find("absent.npy: no such file") != std::string::npos);
    CHECK(io_error_of([&] { io::read_npy(dir.path); }).find("not a regular file") != std::string::npos);
}

TEST_CASE("npz: reads numpy's savez and savez_compressed; writes both, atomically") {
    for (const char* file : {"net_stored.npz", "net_deflated.npz"}) {
        INFO(file);
        const auto arrays = io::read_npz(npz_dir / file);
        REQUIRE(arrays.size() == 4);
        const auto w = arrays.at("fc1.weight").as<double, 2>();
        CHECK(w(1, 2) == doctest::Approx(0.5));
        CHECK(w(3, 0) == doctest::Approx(0.9));
        CHECK(arrays.at("fc2.bias").as<double, 1>()(1) == 3.0);
        CHECK(arrays.at("fc2.weight").source.find(std::string(file) + ":fc2.weight.npy") != std::string::npos);
    }
    ScratchDir dir;
    std::map<std::string, io::NpyArray> arrays;
    arrays["a.weight"] = io::NpyArray::from(xt::xtensor<double, 2>(xt::ones<double>({30, 20})));
    arrays["mask"] = io::NpyArray::from(xt::xtensor<bool, 1>{true, false});
    arrays["n"] = io::NpyArray::from(xt::xtensor<std::int64_t, 1>{5});
    io::write_npz(dir.path / "stored.npz", arrays);
    io::write_npz(dir.path / "deflated.npz", arrays, true);
    CHECK(fs::file_size(dir.path / "deflated.npz") < fs::file_size(dir.path / "stored.npz") / 4);
    for (const char* file : {"stored.npz", "deflated.npz"}) {
        const auto back = io::read_npz(dir.path / file);
        REQUIRE(back.size() == 3);
        CHECK(back.at("a.weight").as<double, 2>() == xt::ones<double>({30, 20}));
        CHECK(back.at("mask").as<bool, 1>() == xt::xtensor<bool, 1>{true, false});
        CHECK(back.at("n").as<std::int64_t, 1>()(0) == 5);
    }
    io::write_npz(dir.path / "empty.npz", {});
    CHECK(io::read_npz(dir.path / "empty.npz").empty());
    CHECK(dir.entries() == std::vector<std::string>{"deflated.npz", "empty.npz", "stored.npz"});
}

TEST_CASE("npz: bad archives are io_errors naming the file") {
    ScratchDir dir;
    write_bytes(dir.path / "garbage.npz", "this is not a zip archive at all, not even close.....");
    CHECK(io_error_of([&] { io::read_npz(dir.path / "garbage.npz"); }).find("garbage.npz") != std::string::npos);
    const std::string full = xgrad::testing::read_bytes(npz_dir / "net_deflated.npz");
    write_bytes(dir.path / "cut.npz", full.substr(0, full.size() / 2));
    CHECK(io_error_of([&] { io::read_npz(dir.path / "cut.npz"); }).find("cut.npz") != std::string::npos);
    // a damaged deflate stream fails the entry, naming it
    std::string damaged = full;
    for (std::size_t k = 60; k < 90; ++k) damaged[k] = char(damaged[k] ^ 0x5a);
    write_bytes(dir.path / "damaged.npz", damaged);
    const std::string msg = io_error_of([&] { io::read_npz(dir.path / "damaged.npz"); });
    CHECK(msg.find("damaged.npz:fc1.weight.npy") != std::string::npos);
    CHECK(io_error_of([&] { io::read_npz(dir.path / "absent.npz"); }).find("absent.npz: no such file") !=
          std::string::npos);
    // an entry inflating past the size its headers declare is stopped one chunk past that size
    std::map<std::string, io::NpyArray> big;
    big["w"] = io::NpyArray::from(xt::xtensor<double, 1>(xt::zeros<double>({100000})));
    io::write_npz(dir.path / "big.npz", big, true);
    std::string lying = xgrad::testing::read_bytes(dir.path / "big.npz");
    auto set_u32 = [&](std::size_t at, std::uint32_t v) {
        for (int k = 0; k < 4; ++k) lying[at + k] = char((v >> (8 * k)) & 0xff);
    };
    set_u32(lying.find("PK\x03\x04") + 22, 1000);  // local header: uncompressed size
    set_u32(lying.find("PK\x01\x02") + 24, 1000);  // central directory: the same
    write_bytes(dir.path / "lying.npz", lying);
    CHECK(io_error_of([&] { io::read_npz(dir.path / "lying.npz"); })
              .find("lying.npz:w.npy: the entry holds more than the 1000 bytes its header says") != std::string::npos);
    // the same archives parsed from memory give the same arrays and the same messages, under the given name
    const auto* bytes = reinterpret_cast<const std::byte*>(full.data());
    CHECK(io::parse_npz(bytes, full.size(), "mem.npz").at("fc2.bias").as<double, 1>()(1) == 3.0);
    CHECK(io_error_of([&] { io::parse_npz(bytes, full.size() / 2, "mem.npz"); }).find("mem.npz: not a readable") == 0);
    const auto* broken = reinterpret_cast<const std::byte*>(damaged.data());
    CHECK(io_error_of([&] { io::parse_npz(broken, damaged.size(), "mem.npz"); }).find("mem.npz:fc1.weight.npy") == 0);
}

TEST_CASE("state dict: save, load, numpy-written files, dtype conversion on request") {
    ScratchDir dir;
    auto net = make_net<double>();
    io::save_state_dict(net, dir.path / "net.npz");
    const auto saved = io::read_npz(dir.path / "net.npz");
    CHECK(saved.size() == 4);
    CHECK(saved.count("fc1.weight") == 1);
    CHECK(saved.count("fc2.bias") == 1);
    auto other = make_net<double>();
    other.fc1.weight.value().fill(0);
    const double* storage = other.fc1.weight.value().data();
    io::load_state_dict(other, dir.path / "net.npz");
    CHECK(other.fc1.weight.value() == net.fc1.weight.value());
    CHECK(other.fc2.bias.value() == net.fc2.bias.value());
    CHECK(other.fc1.weight.value().data() == storage);  // loaded in place
    for (const char* file : {"net_stored.npz", "net_deflated.npz"}) {
        io::load_state_dict(other, npz_dir / file);
        CHECK(other.fc1.weight.value()(2, 1) == doctest::Approx(0.7));
        CHECK(other.fc2.weight.value()(1, 3) == doctest::Approx(-7.0 / 4));
        CHECK(other.fc1.bias.value()(2) == 0.5);
    }
    // float32 file into a double model: an error unless asked to convert
    const std::string msg = io_error_of([&] { io::load_state_dict(other, npz_dir / "net_f32.npz"); });
    CHECK(msg.find("net_f32.npz") != std::string::npos);
    CHECK(msg.find("fc1.weight has dtype float32") != std::string::npos);
    io::load_state_dict(other, npz_dir / "net_f32.npz", {.convert_dtype = true});
    CHECK(other.fc2.bias.value()(0) == 0.125);
    auto net32 = make_net<float>();
    io::load_state_dict(net32, npz_dir / "net_f32.npz");
    CHECK(net32.fc1.weight.value()(1, 1) == doctest::Approx(0.4f));
    io::save_state_dict(net32, dir.path / "net32.npz", true);
    CHECK(io::read_npz(dir.path / "net32.npz").at("fc1.weight").dtype == io::Dtype::float32);
}

TEST_CASE("state dict: missing, unexpected and mis-shaped keys in one error; the model is unchanged") {
    auto net = make_net<double>();
    const auto before = net.fc1.weight.value();
    auto arrays = io::state_dict(make_net<double>());
    arrays.erase("fc2.bias");
    arrays.erase("fc1.bias");
    arrays["fc3.weight"] = io::NpyArray::from(xt::xtensor<double, 1>{1.0});
    arrays["fc2.weight"] = io::NpyArray::from(xt::xtensor<double, 2>(xt::zeros<double>({4, 2})));
    arrays["fc1.weight"] = io::NpyArray::from(xt::xtensor<double, 2>(xt::zeros<double>({4, 3})));
    const std::string msg = io_error_of([&] { io::load_state_dict(net, arrays, {}, "ckpt.npz"); });
    INFO(msg);
    CHECK(msg.find("ckpt.npz") == 0);
    CHECK(msg.find("missing keys: fc1.bias, fc2.bias") != std::string::npos);
    CHECK(msg.find("unexpected keys: fc3.weight") != std::string::npos);
    CHECK(msg.find("fc2.weight has shape (4, 2), the model expects (2, 4)") != std::string::npos);
    CHECK(net.fc1.weight.value() == before);
    arrays = io::state_dict(make_net<double>());
    arrays["fc1.bias"] = io::NpyArray::from(xt::xtensor<std::int64_t, 1>{1, 2, 3, 4});
    CHECK(io_error_of([&] { io::load_state_dict(net, arrays, {.convert_dtype = true}); }).find("has dtype int64") !=
          std::string::npos);
}

}  // namespace test_io_io
