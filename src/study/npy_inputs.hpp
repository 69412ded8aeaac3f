// Reading a tool's input folder (`xgrad attention`, `xgrad transformer`): IN/<name>.npy with checks
// whose io_errors name the file: shape, dtype (every float input of a run has one dtype), finite
// values, and masks (bool: torch's "true = ignore"; float: added to the scores).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/io/npy.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/mask.hpp"

namespace xgrad::cli {

namespace fs = std::filesystem;
using io::Dtype, io::NpyArray, io::dtype_name, io::dtype_of, io::read_npy;

// Reads IN/<name>.npy; `required` false returns nullopt when the file does not exist.
inline std::optional<NpyArray> read_input(const fs::path& in, const std::string& name, bool required = true) {
    const fs::path p = in / (name + ".npy");
    std::error_code ec;
    if (!required && !fs::exists(p, ec)) return std::nullopt;
    return read_npy(p);
}

inline void expect_shape(const NpyArray& a, const std::vector<std::size_t>& want, const std::string& why) {
    if (a.shape != want)
        throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected " + shape_str(want) + " " + why);
}

// Every element finite; masks may hold -inf (ignore) but not NaN or +inf.
inline void expect_finite(const NpyArray& a, bool allow_minus_inf = false) {
    if (const auto bad = a.first_nonfinite(allow_minus_inf))
        throw io_error(a.source + ": " + *bad + "; inputs must be finite");
}

// IN/<name>.npy as token ids: int64 (B, T) with 1 <= T <= positions (the model's `limit`, named
// in the message) and every id in [0, vocab) (targets: -1, ignored, too).
inline xt::xtensor<std::int64_t, 2> read_token_ids(const fs::path& in, const std::string& name, std::size_t positions,
                                                   const char* limit, std::size_t vocab, bool targets) {
    const NpyArray a = *read_input(in, name);
    if (a.dtype != Dtype::int64) throw io_error(a.source + ": has dtype " + dtype_name(a.dtype) + ", expected int64");
    if (a.shape.size() != 2 || a.shape[0] == 0 || a.shape[1] == 0 || a.shape[1] > positions)
        throw io_error(a.source + ": has shape " + shape_str(a.shape) + ", expected (B, T) with 1 <= T <= " + limit + " " +
                       std::to_string(positions));
    auto ids = a.as<std::int64_t, 2>();
    for (std::size_t k = 0; k < ids.size(); ++k) {
        const std::int64_t v = ids.data()[k];
        if ((v < 0 && !(targets && v == -1)) || v >= std::int64_t(vocab))
            throw io_error(a.source + ": element " + std::to_string(k) + " is " + std::to_string(v) + ", outside [" +
                           (targets ? "-1 (ignored), 0" : "0") + ", " + std::to_string(vocab) + ")");
    }
    return ids;
}

// IN/idx.npy and IN/targets.npy (read_token_ids), of one shape.
inline std::pair<xt::xtensor<std::int64_t, 2>, xt::xtensor<std::int64_t, 2>> read_idx_targets(
    const fs::path& in, std::size_t positions, const char* limit, std::size_t vocab) {
    auto idx = read_token_ids(in, "idx", positions, limit, vocab, false);
    auto targets = read_token_ids(in, "targets", positions, limit, vocab, true);
    if (idx.shape() != targets.shape())
        throw io_error((in / "targets.npy").string() + ": has shape " + shape_str(targets.shape()) + ", idx.npy has " +
                       shape_str(idx.shape()));
    return {std::move(idx), std::move(targets)};
}

template <Real T>
void expect_dtype(const NpyArray& a, const std::string& run_source) {
    if (a.dtype != dtype_of<T>())
        throw io_error(a.source + ": has dtype " + dtype_name(a.dtype) + " but " + run_source + " is " +
                       dtype_name(dtype_of<T>()) + "; all float inputs must have the same dtype");
}

// IN/<name>.npy for every parameter of `model` (T its element type), each of the model's shape, of
// dtype T (the file `first_source` set it), finite.
template <Real T, class Model>
std::map<std::string, NpyArray> read_parameter_files(const fs::path& in, const Model& model, const std::string& first_source) {
    std::map<std::string, NpyArray> arrays;
    for_each_parameter_name(model, [&](const std::string& name, const auto& v) {
        NpyArray a = *read_input(in, name);
        expect_dtype<T>(a, first_source);
        expect_shape(a, std::vector<std::size_t>(v.shape().begin(), v.shape().end()), "(from config.json)");
        expect_finite(a);
        arrays.emplace(name, std::move(a));
    });
    return arrays;
}

template <Real T>
std::optional<AnyMask<T>> read_mask(const fs::path& in, const std::string& name,
                                    const std::vector<std::vector<std::size_t>>& allowed, const std::string& run_source) {
    auto a = read_input(in, name, false);
    if (!a) return std::nullopt;
    bool ok = false;
    for (const auto& s : allowed) ok = ok || a->shape == s;
    if (!ok) {
        std::string want;
        for (const auto& s : allowed) want += (want.empty() ? "" : " or ") + shape_str(s);
        throw io_error(a->source + ": has shape " + shape_str(a->shape) + ", expected " + want);
    }
    if (a->dtype == Dtype::bool8) return ignore_mask(a->as_xarray<bool>());
    if (!a->is_float()) throw io_error(a->source + ": a mask must be bool or float, got " + dtype_name(a->dtype));
    expect_dtype<T>(*a, run_source);
    expect_finite(*a, true);
    return additive_mask(a->as_xarray<T>());
}

// Where one query's row is in an output gradient (`xgrad explore`'s per-position losses): query
// `position` of sequence `sequence` in a (..., L, B, E) array, (..., B, L, E) when batch_first, or
// (..., L, E) unbatched; leading axes (a decoder's intermediate layers) are kept whole.
struct OutputRow {
    std::size_t sequence = 0;
    long position = -1;  // -1: every row (the whole loss)
};

// Sets every row but `keep`'s to 0, in an array of `itemsize`-byte elements.
inline void keep_output_row(std::byte* data, std::size_t itemsize, const std::vector<std::size_t>& shape, bool batched,
                            bool batch_first, const OutputRow& keep) {
    if (keep.position < 0) return;
    const std::size_t axes = shape.size(), E = shape.back();
    const std::size_t L = batched && !batch_first ? shape[axes - 3] : shape[axes - 2];
    const std::size_t B = batched ? (batch_first ? shape[axes - 3] : shape[axes - 2]) : 1;
    std::size_t rows = 1;
    for (std::size_t d = 0; d + 1 < axes; ++d) rows *= shape[d];
    for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t within = r % (L * B);
        const std::size_t t = batch_first ? within % L : within / B, b = batch_first ? within / L : within % B;
        if (t != std::size_t(keep.position) || b != keep.sequence) std::fill_n(data + r * E * itemsize, E * itemsize, std::byte{0});
    }
}

}  // namespace xgrad::cli
