// DistributedSampler: which dataset indices each rank takes in an epoch, with the semantics (and,
// when shuffling, the very indices) of torch.utils.data.DistributedSampler (torch 1.13):
//
//   indices = shuffle ? randperm(size, seeded with seed + epoch) : 0, 1, ..., size-1
//   drop_last: cut to the largest multiple of world_size; otherwise pad by repeating indices
//              from the start (wrapping as often as needed) up to the next multiple
//   rank r takes indices[r], indices[r + world_size], indices[r + 2·world_size], ...
//
// randperm is torch's CPU algorithm (aten randperm_cpu): mt19937 seeded with the low 32 bits of
// the seed, then for i = 0 .. n-2 swap element i with element i + (draw mod (n - i)). Needs no MPI.
#pragma once
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "xgrad/core/error.hpp"

namespace xgrad::dist {

// torch.randperm(n, generator=torch.Generator().manual_seed(seed)) for n below 2^24.
inline std::vector<std::int64_t> torch_randperm(std::size_t n, std::uint64_t seed) {
    if (n >= (std::size_t(1) << 24))
        throw value_error("torch_randperm: n = " + std::to_string(n) +
                          " is beyond the range reproduced (torch draws 64-bit numbers from 2^24 on)");
    std::vector<std::int64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 engine(std::uint32_t(seed & 0xffffffffu));  // torch's at::mt19937 seeding
    for (std::size_t i = 0; i + 1 < n; ++i) {
        const std::size_t z = std::size_t(engine()) % (n - i);
        std::swap(perm[i], perm[i + z]);
    }
    return perm;
}

struct DistributedSamplerOptions {
    bool shuffle = true;
    std::uint64_t seed = 0;
    bool drop_last = false;
};

class DistributedSampler {
public:
    DistributedSampler(std::size_t dataset_size, int world_size, int rank, DistributedSamplerOptions options = {})
        : size_(dataset_size), world_(std::size_t(world_size)), rank_(std::size_t(rank)), options_(options) {
        if (world_size < 1 || rank < 0 || rank >= world_size)
            throw value_error("DistributedSampler: rank " + std::to_string(rank) + " is outside world size " +
                              std::to_string(world_size));
        if (dataset_size == 0 || (options.drop_last && dataset_size < world_))
            throw value_error("DistributedSampler: a dataset of " + std::to_string(dataset_size) +
                              " items cannot give every one of " + std::to_string(world_size) + " ranks an item");
    }

    // Reshuffles for this epoch (torch's set_epoch): same seed and epoch, same indices.
    void set_epoch(std::uint64_t epoch) { epoch_ = epoch; }

    // Indices per rank this epoch (torch's num_samples).
    std::size_t num_samples() const {
        return options_.drop_last ? size_ / world_ : (size_ + world_ - 1) / world_;
    }

    // This rank's indices for the current epoch.
    std::vector<std::int64_t> indices() const {
        std::vector<std::int64_t> all;
        if (options_.shuffle) {
            all = torch_randperm(size_, options_.seed + epoch_);
        } else {
            all.resize(size_);
            std::iota(all.begin(), all.end(), 0);
        }
        const std::size_t total = num_samples() * world_;
        if (total <= size_) {
            all.resize(total);
        } else {
            for (std::size_t i = size_; i < total; ++i) all.push_back(all[i - size_]);  // wraps as often as needed
        }
        std::vector<std::int64_t> mine;
        mine.reserve(num_samples());
        for (std::size_t i = rank_; i < total; i += world_) mine.push_back(all[i]);
        return mine;
    }

private:
    std::size_t size_, world_, rank_;
    DistributedSamplerOptions options_;
    std::uint64_t epoch_ = 0;
};

}  // namespace xgrad::dist
