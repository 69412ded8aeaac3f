// Collectives over MPI_COMM_WORLD on float and double buffers (and bytes), in place. With world
// size 1 they change nothing and call nothing.
//
//   allreduce_sum(ctx, span)            every rank gets the elementwise sum (MPI_Allreduce)
//   allreduce_average(ctx, span)        the sum divided by the world size
//   ordered_allreduce_sum(ctx, span)    deterministic: each element summed in rank order,
//                                       ((x0 + x1) + x2) + ..., bitwise the same on every rank and
//                                       in every run (a reduce-scatter by all-to-all, then
//                                       all-gather: each element is added up once, by one rank)
//   broadcast(ctx, span, root)          every rank gets root's values
//
// MPI_Allreduce leaves the order of additions to the library (it may differ between runs, and in
// principle between ranks): the deterministic mode of DataParallel uses ordered_allreduce_sum.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "xgrad/dist/context.hpp"

namespace xgrad::dist {

namespace detail {
#if XGRAD_HAVE_MPI
template <class T>
MPI_Datatype mpi_type() {
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
    else if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
    else if constexpr (std::is_same_v<T, int>) return MPI_INT;
    else if constexpr (std::is_same_v<T, char> || std::is_same_v<T, std::byte>) return MPI_BYTE;
    else static_assert(sizeof(T) == 0, "xgrad: dist collectives take float, double, int, int64, uint64 or bytes");
}
// An MPI return code other than MPI_SUCCESS becomes a dist_error naming the call and the rank.
inline void check(int code, const char* call, const Context& ctx) {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw dist_error(std::string(call) + " failed on rank " + std::to_string(ctx.rank()) + ": " +
                     std::string(text, std::size_t(length)));
}
// MPI counts are int: a longer buffer goes in pieces.
constexpr std::size_t max_count = std::size_t(std::numeric_limits<int>::max());
#endif
}  // namespace detail

template <class T>
void allreduce_sum(const Context& ctx, [[maybe_unused]] std::span<T> data) {
    if (ctx.world_size() == 1) return;
#if XGRAD_HAVE_MPI
    for (std::size_t at = 0; at < data.size(); at += detail::max_count) {
        const int n = int(std::min(detail::max_count, data.size() - at));
        detail::check(MPI_Allreduce(MPI_IN_PLACE, data.data() + at, n, detail::mpi_type<T>(), MPI_SUM, MPI_COMM_WORLD),
                      "MPI_Allreduce", ctx);
    }
#endif
}

template <class T>
void allreduce_max(const Context& ctx, [[maybe_unused]] std::span<T> data) {
    if (ctx.world_size() == 1) return;
#if XGRAD_HAVE_MPI
    detail::check(MPI_Allreduce(MPI_IN_PLACE, data.data(), int(data.size()), detail::mpi_type<T>(), MPI_MAX,
                                MPI_COMM_WORLD),
                  "MPI_Allreduce", ctx);
#endif
}

template <class T>
void broadcast(const Context& ctx, [[maybe_unused]] std::span<T> data, [[maybe_unused]] int root = 0) {
    if (ctx.world_size() == 1) return;
#if XGRAD_HAVE_MPI
    for (std::size_t at = 0; at < data.size(); at += detail::max_count) {
        const int n = int(std::min(detail::max_count, data.size() - at));
        detail::check(MPI_Bcast(data.data() + at, n, detail::mpi_type<T>(), root, MPI_COMM_WORLD), "MPI_Bcast", ctx);
    }
#else
    (void)root;
#endif
}

// A value of root's on every rank.
template <class T>
T broadcast_value(const Context& ctx, T value, int root = 0) {
    broadcast(ctx, std::span<T>(&value, 1), root);
    return value;
}

// root's string on every rank.
inline std::string broadcast_string(const Context& ctx, std::string text, int root = 0) {
    const auto size = broadcast_value<std::uint64_t>(ctx, text.size(), root);
    text.resize(std::size_t(size));
    broadcast(ctx, std::span<char>(text.data(), text.size()), root);
    return text;
}

// Every rank's `count` values, rank after rank, on every rank.
template <class T>
std::vector<T> allgather(const Context& ctx, std::span<const T> mine) {
    std::vector<T> all(mine.size() * std::size_t(ctx.world_size()));
    if (ctx.world_size() == 1) {
        std::copy(mine.begin(), mine.end(), all.begin());
        return all;
    }
#if XGRAD_HAVE_MPI
    detail::check(MPI_Allgather(mine.data(), int(mine.size()), detail::mpi_type<T>(), all.data(), int(mine.size()),
                                detail::mpi_type<T>(), MPI_COMM_WORLD),
                  "MPI_Allgather", ctx);
#endif
    return all;
}

inline void barrier(const Context& ctx) {
    if (ctx.world_size() == 1) return;
#if XGRAD_HAVE_MPI
    detail::check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier", ctx);
#endif
}

// Deterministic sum. The buffer is cut into world_size chunks; rank r receives chunk r of every
// rank (all-to-all), adds them in rank order, and every rank gathers the summed chunks back.
template <class T>
void ordered_allreduce_sum(const Context& ctx, [[maybe_unused]] std::span<T> data) {
    const int world = ctx.world_size();
    if (world == 1) return;
#if XGRAD_HAVE_MPI
    if (data.size() > detail::max_count / std::size_t(world))
        throw dist_error("ordered_allreduce_sum: " + std::to_string(data.size()) +
                         " elements are more than one call takes; reduce in smaller buckets");
    const std::size_t n = data.size(), w = std::size_t(world), r = std::size_t(ctx.rank());
    // chunk k: elements [k·n/w, (k+1)·n/w)
    std::vector<int> counts(w), offsets(w), mine_counts(w), mine_offsets(w);
    for (std::size_t k = 0; k < w; ++k) {
        offsets[k] = int(k * n / w);
        counts[k] = int((k + 1) * n / w - k * n / w);
    }
    const int chunk = counts[r];
    for (std::size_t k = 0; k < w; ++k) mine_counts[k] = chunk, mine_offsets[k] = int(k) * chunk;
    std::vector<T> pieces(std::size_t(chunk) * w);
    const MPI_Datatype type = detail::mpi_type<T>();
    detail::check(MPI_Alltoallv(data.data(), counts.data(), offsets.data(), type, pieces.data(), mine_counts.data(),
                                mine_offsets.data(), type, MPI_COMM_WORLD),
                  "MPI_Alltoallv", ctx);
    T* sum = data.data() + offsets[r];
    for (int i = 0; i < chunk; ++i) {
        T s = pieces[std::size_t(i)];
        for (std::size_t k = 1; k < w; ++k) s += pieces[k * std::size_t(chunk) + std::size_t(i)];
        sum[i] = s;
    }
    detail::check(MPI_Allgatherv(MPI_IN_PLACE, 0, type, data.data(), counts.data(), offsets.data(), type,
                                 MPI_COMM_WORLD),
                  "MPI_Allgatherv", ctx);
#endif
}

// The average over ranks: the sum (ordered when `deterministic`), then divided by the world size.
template <class T>
void allreduce_average(const Context& ctx, std::span<T> data, bool deterministic = false) {
    if (ctx.world_size() == 1) return;
    deterministic ? ordered_allreduce_sum(ctx, data) : allreduce_sum(ctx, data);
    const T world = T(ctx.world_size());
    for (T& x : data) x /= world;
}

}  // namespace xgrad::dist
