// dist::DistributedSampler against torch.utils.data.DistributedSampler's indices
// (tests/fixtures/make_sampler.py), and by hand. Needs no MPI.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/dist/sampler.hpp"
#include "xgrad/io/npy.hpp"

using namespace xgrad;

TEST_CASE("DistributedSampler: every rank's indices are torch's, for every fixture case") {
    const auto dir = std::filesystem::path(XGRAD_FIXTURES) / "sampler";
    const auto cases = io::read_npy(dir / "cases.npy").as_xarray<std::int64_t>();
    REQUIRE(cases.shape(1) == 6);
    for (std::size_t k = 0; k < cases.shape(0); ++k) {
        const auto expected = io::read_npy(dir / ("case" + std::to_string(k) + ".npy")).as_xarray<std::int64_t>();
        const int world = int(cases(k, 1));
        const dist::DistributedSamplerOptions options{.shuffle = cases(k, 4) != 0,
                                                      .seed = std::uint64_t(cases(k, 2)),
                                                      .drop_last = cases(k, 5) != 0};
        REQUIRE(expected.shape(0) == std::size_t(world));
        for (int r = 0; r < world; ++r) {
            dist::DistributedSampler sampler(std::size_t(cases(k, 0)), world, r, options);
            sampler.set_epoch(std::uint64_t(cases(k, 3)));
            const auto got = sampler.indices();
            CAPTURE(k);
            CAPTURE(r);
            REQUIRE(got.size() == expected.shape(1));
            CHECK(sampler.num_samples() == expected.shape(1));
            for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == expected(std::size_t(r), i));
        }
    }
}

TEST_CASE("DistributedSampler: padding wraps, drop_last cuts, without shuffling (by hand)") {
    // 5 items over 3 ranks: 0 1 2 3 4 | 0 -> rank 0: 0 3, rank 1: 1 4, rank 2: 2 0
    const dist::DistributedSamplerOptions plain{.shuffle = false};
    CHECK(dist::DistributedSampler(5, 3, 0, plain).indices() == std::vector<std::int64_t>{0, 3});
    CHECK(dist::DistributedSampler(5, 3, 1, plain).indices() == std::vector<std::int64_t>{1, 4});
    CHECK(dist::DistributedSampler(5, 3, 2, plain).indices() == std::vector<std::int64_t>{2, 0});
    // 2 items over 5 ranks wraps twice: 0 1 0 1 0
    CHECK(dist::DistributedSampler(2, 5, 4, plain).indices() == std::vector<std::int64_t>{0});
    CHECK(dist::DistributedSampler(2, 5, 3, plain).indices() == std::vector<std::int64_t>{1});
    // drop_last: 0 1 2 | 3 4 dropped -> rank 1: 1
    CHECK(dist::DistributedSampler(5, 3, 1, {.shuffle = false, .drop_last = true}).indices() ==
          std::vector<std::int64_t>{1});
    // Same seed and epoch, same order; another epoch, another order.
    dist::DistributedSampler a(100, 2, 0, {.seed = 5}), b(100, 2, 0, {.seed = 5});
    CHECK(a.indices() == b.indices());
    b.set_epoch(1);
    CHECK(a.indices() != b.indices());
}

TEST_CASE("DistributedSampler: a rank outside the world, or too few items for drop_last, is a value_error") {
    CHECK_THROWS_AS(dist::DistributedSampler(10, 2, 2), value_error);
    CHECK_THROWS_AS(dist::DistributedSampler(10, 0, 0), value_error);
    CHECK_THROWS_AS(dist::DistributedSampler(2, 3, 0, {.drop_last = true}), value_error);
    CHECK_THROWS_AS(dist::DistributedSampler(0, 1, 0), value_error);
}
