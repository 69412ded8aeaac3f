// Checkpoints of a data-parallel run (the format of io/checkpoint.hpp). Every rank calls these;
// with world size 1 they are io::save_checkpoint, io::load_checkpoint and io::read_checkpoint_config.
//
// - save: the parameters and the optimizer state are the same on every rank, so rank 0 writes
//   them (atomically) while the others wait. Each rank's generators are saved under their name
//   with the rank appended ("data" of rank 1 is train_state/rng/data.rank1), with the world size
//   in the config (train_state/config/world_size).
// - load: rank 0 reads the file and broadcasts its bytes, so the machines need no shared
//   filesystem; every rank checks and loads the same bytes (a problem throws the same io_error on
//   every rank) and gets back its own generators. The world size must be the one saved.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/core/random.hpp"
#include "xgrad/dist/collectives.hpp"
#include "xgrad/io/checkpoint.hpp"

namespace xgrad::dist {

inline constexpr const char* world_size_key = "world_size";

namespace detail {

// Rank 0's file on every rank: rank 0 reads it, the others get its bytes into a private temporary
// file, removed with this object. A file rank 0 cannot read throws the same io_error everywhere.
class FetchedFile {
public:
    FetchedFile(const Context& ctx, const std::filesystem::path& on_root) : path_(on_root) {
        if (ctx.world_size() == 1) return;
        std::vector<std::byte> bytes;
        std::string problem;
        if (ctx.is_root()) try {
                bytes = io::read_file_bytes(on_root);
            } catch (const std::exception& e) {
                problem = e.what();
            }
        problem = broadcast_string(ctx, problem);
        if (!problem.empty()) throw io_error(problem);
        bytes.resize(std::size_t(broadcast_value<std::uint64_t>(ctx, bytes.size())));
        broadcast(ctx, std::span<std::byte>(bytes));
        if (ctx.is_root()) return;
        path_ = std::filesystem::temp_directory_path() /
                ("xgrad-" + std::to_string(::getpid()) + "-rank" + std::to_string(ctx.rank()) + "-" +
                 on_root.filename().string());
        io::write_file_atomic(path_, bytes.data(), bytes.size());
        temporary_ = true;
    }
    ~FetchedFile() {
        std::error_code ignored;
        if (temporary_) std::filesystem::remove(path_, ignored);
    }
    FetchedFile(const FetchedFile&) = delete;
    FetchedFile& operator=(const FetchedFile&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    bool temporary_ = false;
};

inline std::string rank_name(const std::string& name, int rank) { return name + ".rank" + std::to_string(rank); }

}  // namespace detail

template <class M, class Opt>
    requires Module<M>
void save_checkpoint(const Context& ctx, const std::filesystem::path& path, const M& model, const Opt& optimizer,
                     std::int64_t step, const io::NamedGenerators& generators = {}, io::CheckpointConfig config = {},
                     bool compress = false) {
    if (ctx.world_size() == 1) return io::save_checkpoint(path, model, optimizer, step, generators, config, compress);
    // Every rank's generator states, gathered on every rank (each the same length: Generator::state()).
    std::vector<Generator> copies;
    copies.reserve(generators.size() * std::size_t(ctx.world_size()));
    io::NamedGenerators all;
    for (const auto& [name, gen] : generators) {
        const std::vector<std::uint64_t> mine = gen->state();
        const std::vector<std::uint64_t> words = allgather(ctx, std::span<const std::uint64_t>(mine));
        for (int r = 0; r < ctx.world_size(); ++r) {
            copies.emplace_back().set_state({words.begin() + std::ptrdiff_t(r * mine.size()),
                                             words.begin() + std::ptrdiff_t((r + 1) * mine.size())});
            all.emplace_back(detail::rank_name(name, r), &copies.back());
        }
    }
    config[world_size_key] = ctx.world_size();
    if (ctx.is_root()) io::save_checkpoint(path, model, optimizer, step, all, config, compress);
    barrier(ctx);  // the file is complete when any rank goes on
}

inline io::CheckpointConfig read_checkpoint_config(const Context& ctx, const std::filesystem::path& path) {
    const detail::FetchedFile file(ctx, path);
    return io::read_checkpoint_config(file.path());
}

template <class M, class Opt>
    requires Module<M>
std::int64_t load_checkpoint(const Context& ctx, const std::filesystem::path& path, M& model, Opt& optimizer,
                             const io::NamedGenerators& generators = {}) {
    if (ctx.world_size() == 1) {
        // A checkpoint of a distributed run holds every rank's generators, not these.
        const auto config = io::read_checkpoint_config(path);
        if (const auto it = config.find(world_size_key); it != config.end() && it->second != 1 && !generators.empty())
            throw io_error(path.string() + ": the checkpoint was made by " + std::to_string(it->second) +
                           " ranks; resume it with mpirun -np " + std::to_string(it->second));
        return io::load_checkpoint(path, model, optimizer, generators);
    }
    const detail::FetchedFile file(ctx, path);
    const auto config = io::read_checkpoint_config(file.path());
    const auto it = config.find(world_size_key);
    const std::int64_t saved = it == config.end() ? 1 : it->second;
    if (saved != ctx.world_size() && !generators.empty())
        throw io_error(path.string() + ": the checkpoint was made by " + std::to_string(saved) +
                       (saved == 1 ? " process" : " ranks") + " but this run has " + std::to_string(ctx.world_size()) +
                       ": every rank's generators must be restored; resume with mpirun -np " + std::to_string(saved));
    // Every rank's generators are checked; only this rank's are kept.
    std::vector<Generator> others;
    others.reserve(generators.size() * std::size_t(ctx.world_size()));
    io::NamedGenerators all;
    for (const auto& [name, gen] : generators)
        for (int r = 0; r < ctx.world_size(); ++r)
            all.emplace_back(detail::rank_name(name, r), r == ctx.rank() ? gen : &others.emplace_back(*gen));
    return io::load_checkpoint(file.path(), model, optimizer, all);
}

}  // namespace xgrad::dist
