// What every data-parallel `xgrad` command shares (train copy, bench; any train command):
// the process group, the even split of a global batch over the ranks, and rank 0 as the only
// rank that prints and writes. Outside mpirun it is world size 1 and changes nothing. A command
// using it registers in its setup_* with data_parallel_commands().insert(&cmd) (commands/commands.hpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "xgrad/dist/checkpoint.hpp"
#include "xgrad/dist/collectives.hpp"
#include "xgrad/dist/context.hpp"
#include "xgrad/dist/data_parallel.hpp"

namespace xgrad::cli {

// The tool's process group: MPI is initialized on first use (under mpirun) and finalized at exit.
// main() ends the whole job (MPI_Abort) when a command throws on any rank.
inline dist::Context& process_group() {
    static dist::Context ctx;
    return ctx;
}

// Rows [begin, end) of a global batch of `global` rows that this rank takes.
struct Shard {
    std::size_t begin, end;
    std::size_t size() const { return end - begin; }
};

// The even share of `global` rows (--batch); value_error naming `option` when it does not divide.
inline Shard even_shard(const dist::Context& ctx, std::size_t global, const std::string& option) {
    const auto world = std::size_t(ctx.world_size()), rank = std::size_t(ctx.rank());
    if (global % world != 0)
        throw value_error(option + " (" + std::to_string(global) + ") is the global batch and must be a multiple of the " +
                          std::to_string(world) + " ranks (mpirun -np " + std::to_string(world) +
                          "): each rank takes an equal share");
    const std::size_t each = global / world;
    return {rank * each, (rank + 1) * each};
}

// A near-even share of `total` items (held-out evaluation): the first total % world ranks take one more.
inline Shard uneven_shard(const dist::Context& ctx, std::size_t total) {
    const auto world = std::size_t(ctx.world_size()), rank = std::size_t(ctx.rank());
    return {rank * total / world, (rank + 1) * total / world};
}

// ", 2 ranks of 16 sequences" under mpirun, "" in one process: what a command's header line adds.
inline std::string ranks_note(const dist::Context& ctx, Shard shard, const std::string& rows) {
    if (ctx.world_size() == 1) return "";
    return ", " + std::to_string(ctx.world_size()) + " ranks of " + std::to_string(shard.size()) + " " + rows;
}

// The mean over ranks of a per-rank mean of equal-sized shards: the global mean, summed in rank
// order (the same on every rank and in every run).
inline double global_mean(const dist::Context& ctx, double local_mean) {
    dist::allreduce_average(ctx, std::span<double>(&local_mean, 1), true);
    return local_mean;
}

// The sum over ranks (counts), in rank order.
inline double global_sum(const dist::Context& ctx, double local) {
    dist::ordered_allreduce_sum(ctx, std::span<double>(&local, 1));
    return local;
}

// A fraction measured on this rank's `local` items as the fraction over all `total` items of the
// ranks (the counts summed in rank order); a rank with no items adds nothing.
inline double global_fraction(const dist::Context& ctx, double local_fraction, std::size_t local, std::size_t total) {
    const double count = local == 0 ? 0 : std::round(local_fraction * double(local));
    return global_sum(ctx, count) / double(total);
}

// CLI11's ExistingFile, checked on rank 0 only: under mpirun the other machines need not see the
// file (rank 0 reads it and broadcasts it, xgrad/dist/checkpoint.hpp).
inline CLI::Validator existing_file_on_rank0() {
    return CLI::Validator(
        [](std::string& path) -> std::string {
            const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
            if (rank && std::string(rank) != "0") return {};
            return CLI::ExistingFile(path);
        },
        "FILE");
}

}  // namespace xgrad::cli
