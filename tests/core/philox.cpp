// Philox4x32-10 (core/philox.hpp) against the known-answer vectors its authors publish with the
// paper (Random123's kat_vectors), and dropout's mask (ops/dropout.hpp) against its definition in
// docs/ops.md: computed from Philox directly here, the same for any split of the elements.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace test_core_philox {

using namespace xgrad;
using philox::Counter;
using philox::Key;

TEST_CASE("Philox4x32-10 gives the published known answers") {
    struct Known {
        Counter counter;
        Key key;
        Counter expected;
    };
    const Known vectors[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},  // the digits of π
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (const auto& v : vectors) CHECK(philox::block(v.counter, v.key) == v.expected);
    static_assert(philox::block({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5, "Philox is constexpr");
}

TEST_CASE("Philox4x32-10: the lane-parallel blocks equal block() lane by lane") {
    constexpr std::size_t W = 16;
    std::array<std::array<std::uint32_t, W>, 4> words;
    const Key key{0xa4093822, 0x299f31d0};
    philox::blocks<W>(0xfffffff0u, 7, 0x243f6a88, 0x85a308d3, key, words);
    for (std::size_t l = 0; l < W; ++l) {
        const Counter one = philox::block({0xfffffff0u + std::uint32_t(l), 7, 0x243f6a88, 0x85a308d3}, key);
        for (std::size_t w = 0; w < 4; ++w) CHECK(words[w][l] == one[w]);
    }
}

// The mask of docs/ops.md, element by element: kept iff word ⌊(i mod 256)/64⌋ of Philox4x32-10 at
// counter (n, offset) with n = 64·⌊i/256⌋ + i mod 64, key = the seed, is ≥ ⌈p · 2³²⌉; the offset is
// the generator's next 64-bit draw.
std::vector<bool> documented_mask(std::uint64_t seed, std::uint64_t offset, double p, std::size_t count) {
    std::vector<bool> kept(count);
    const auto threshold = std::uint64_t(std::ceil(p * 4294967296.0));
    for (std::size_t i = 0; i < count; ++i) {
        const std::uint64_t n = 64 * (i / 256) + i % 64;
        const Counter c{std::uint32_t(n), std::uint32_t(n >> 32), std::uint32_t(offset), std::uint32_t(offset >> 32)};
        kept[i] = philox::block(c, {std::uint32_t(seed), std::uint32_t(seed >> 32)})[(i % 256) / 64] >= threshold;
    }
    return kept;
}

TEST_CASE("dropout's mask is the documented function of (seed, offset, i)") {
    const std::uint64_t seed = 0x0123456789abcdefULL;
    std::mt19937_64 reference_engine(seed);  // Generator's engine: the offsets are its draws
    const std::uint64_t first_offset = reference_engine(), second_offset = reference_engine();
    Generator gen(seed);
    const std::size_t n = 1000;  // 3 whole groups of 256 and a partial one
    auto x = constant(xt::xtensor<double, 1>(xt::ones<double>({n})));
    for (const std::uint64_t offset : {first_offset, second_offset}) {
        const auto y = dropout(x, 0.3, true, gen);
        const auto kept = documented_mask(seed, offset, 0.3, n);
        std::size_t agree = 0;
        for (std::size_t i = 0; i < n; ++i) agree += (y.value()(i) != 0) == kept[i];
        CHECK(agree == n);
    }
}

TEST_CASE("dropout's mask is the same for any split of the elements and any thread count") {
    Generator gen(5);
    const detail::DropoutDraw draw(0.4, gen);
    const std::size_t n = 777;
    const std::vector<float> x(n, 1.f);
    std::vector<float> whole_y(n), whole_m(n), split_y(n), split_m(n);
    draw.apply(2.f, x.data(), static_cast<const float*>(nullptr), whole_y.data(), whole_m.data(), 0, n);
    for (const std::vector<std::size_t>& cuts :
         {std::vector<std::size_t>{0, 1, 63, 64, 65, 200, 256, n}, {0, 17, 128, 192, 300, n}, {0, 64, n}}) {
        std::fill(split_m.begin(), split_m.end(), -1.f);
        for (std::size_t k = 0; k + 1 < cuts.size(); ++k)
            draw.apply(2.f, x.data(), static_cast<const float*>(nullptr), split_y.data(), split_m.data(), cuts[k], cuts[k + 1]);
        CHECK(split_m == whole_m);
        CHECK(split_y == whole_y);
    }
    // large enough to be split over two threads: the same values as on one
    const auto big = randn<2>({600, 1024}, 3);
    Generator one(9), two(9);
    const auto y1 = dropout(constant(big), 0.25, true, one);
    set_num_threads(2);
    const auto y2 = dropout(constant(big), 0.25, true, two);
    set_num_threads(1);
    CHECK(y1.value() == y2.value());
}

}  // namespace test_core_philox
