// Masks of nn::MultiheadAttention (PyTorch's MHA meaning: a bool mask is true = IGNORE, a float
// mask is ADDED to the scores), and how they become one mask over the scores (N·H, L, S').
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/var.hpp"

namespace xgrad::nn {

// A mask for MHA inputs. Both members may be set: positions ignored by `ignore` are masked and
// `additive` is added everywhere.
template <Real T>
struct AttentionMask {
    std::optional<xt::xarray<bool>> ignore;  // bool: true = ignore (torch MHA key_padding_mask / attn_mask)
    std::optional<xt::xarray<T>> additive;   // float: added to the scores (-inf = ignore)
    static AttentionMask from_bool(xt::xarray<bool> m) { return {std::move(m), std::nullopt}; }
    static AttentionMask from_float(xt::xarray<T> m) { return {std::nullopt, std::move(m)}; }
    explicit operator bool() const { return ignore.has_value() || additive.has_value(); }
};

namespace detail {

// The masks of one MHA call, merged as torch does (bool -> ignore, float -> added; bias_k and
// add_zero_attn columns, j >= S, are never masked): each (N·H, L, S'), absent when unused.
template <Real T>
struct ScoreMasks {
    std::optional<xt::xtensor<bool, 3>> ignore;
    std::optional<xt::xtensor<T, 3>> additive;
};

// The sizes a mask is checked against, and how to describe them in an error.
struct MaskGeometry {
    std::size_t batch, heads, tgt_len, src_len, padded_src_len;  // N, H, L, S, S'
    bool batched;
    std::string inputs;  // "query (3, 2, 4) and key (2, 2, 4)"
};

template <class S>
std::string dyn_shape_str(const S& s) {
    return shape_str(std::vector<std::size_t>(s.begin(), s.end()));
}

template <class A>
bool shape_is(const A& a, const std::vector<std::size_t>& want) {
    return a.dimension() == want.size() && std::equal(want.begin(), want.end(), a.shape().begin());
}

[[noreturn]] inline void mask_shape_error(const std::string& operand, const std::string& got, const std::string& want,
                                          const MaskGeometry& g) {
    throw shape_error("MultiheadAttention: " + operand + " has shape " + got + " but expected " + want + " for " +
                      g.inputs);
}

// Calls f(b, i, j, value) for every score position (b = n·H + h, i < L, j < S) a mask covers.
// layout: 'k' key_padding_mask (N, S) / (S); 'a' attn_mask (L, S) or (N·H, L, S).
template <class V, class F>
void for_each_mask_entry(const xt::xarray<V>& m, char layout, const MaskGeometry& g, F f) {
    const std::size_t L = g.tgt_len, S = g.src_len;
    const bool per_batch_head = layout == 'a' && m.dimension() == 3;
    for (std::size_t b = 0; b < g.batch * g.heads; ++b)
        for (std::size_t i = 0; i < L; ++i)
            for (std::size_t j = 0; j < S; ++j) {
                const std::size_t at = layout == 'k' ? (b / g.heads) * S + j
                                       : per_batch_head ? (b * L + i) * S + j
                                                        : i * S + j;
                f(b, i, j, m.data()[at]);
            }
}

template <class A>
void check_mask_shape(const A& m, char layout, const std::string& operand, const MaskGeometry& g) {
    const std::size_t N = g.batch, L = g.tgt_len, S = g.src_len;
    if (layout == 'k') {
        const auto want = g.batched ? std::vector<std::size_t>{N, S} : std::vector<std::size_t>{S};
        if (!shape_is(m, want))
            mask_shape_error(operand, dyn_shape_str(m.shape()), shape_str(want) + (g.batched ? " (N, S)" : " (S)"), g);
    } else if (!shape_is(m, {L, S}) && !shape_is(m, {N * g.heads, L, S})) {
        mask_shape_error(operand, dyn_shape_str(m.shape()),
                         shape_str(std::vector<std::size_t>{L, S}) + " (L, S) or " +
                             shape_str(std::vector<std::size_t>{N * g.heads, L, S}) +
                             (g.batched ? " (N*num_heads, L, S)" : " (num_heads, L, S)"),
                         g);
    }
}

template <Real T>
void merge_mask(ScoreMasks<T>& out, const AttentionMask<T>& m, char layout, const std::string& operand,
                const MaskGeometry& g) {
    const std::array<std::size_t, 3> shape{g.batch * g.heads, g.tgt_len, g.padded_src_len};
    const std::size_t Sp = g.padded_src_len;
    if (m.ignore) {
        check_mask_shape(*m.ignore, layout, operand + " (bool)", g);
        if (!out.ignore) out.ignore = xt::xtensor<bool, 3>(shape, false);
        bool* p = out.ignore->data();
        for_each_mask_entry(*m.ignore, layout, g, [&](std::size_t b, std::size_t i, std::size_t j, bool v) {
            if (v) p[(b * g.tgt_len + i) * Sp + j] = true;
        });
    }
    if (m.additive) {
        check_mask_shape(*m.additive, layout, operand + " (float)", g);
        if (!out.additive) out.additive = xt::xtensor<T, 3>(shape, T(0));
        T* p = out.additive->data();
        for_each_mask_entry(*m.additive, layout, g, [&](std::size_t b, std::size_t i, std::size_t j, T v) {
            p[(b * g.tgt_len + i) * Sp + j] += v;
        });
    }
}

// Ignores key j > query i (is_causal without attn_mask) or key j >= valid_len (d2l's valid_lens,
// (N) / (N, L) batched, () / (L) unbatched).
template <Real T, class Ignored>
void merge_ignore_rule(ScoreMasks<T>& out, const MaskGeometry& g, Ignored ignored) {
    const std::size_t L = g.tgt_len, Sp = g.padded_src_len;
    if (!out.ignore) out.ignore = xt::xtensor<bool, 3>({g.batch * g.heads, L, Sp}, false);
    bool* p = out.ignore->data();
    for (std::size_t b = 0; b < g.batch * g.heads; ++b)
        for (std::size_t i = 0; i < L; ++i)
            for (std::size_t j = 0; j < g.src_len; ++j)
                if (ignored(b / g.heads, i, j)) p[(b * L + i) * Sp + j] = true;
}

inline void check_valid_lens(const xt::xarray<std::int64_t>& lens, const MaskGeometry& g) {
    const std::size_t N = g.batch, L = g.tgt_len;
    const bool ok = g.batched ? shape_is(lens, {N}) || shape_is(lens, {N, L}) : shape_is(lens, {}) || shape_is(lens, {L});
    if (!ok)
        mask_shape_error("valid_lens", dyn_shape_str(lens.shape()),
                         g.batched ? shape_str(std::vector<std::size_t>{N}) + " (N) or " +
                                         shape_str(std::vector<std::size_t>{N, L}) + " (N, L)"
                                   : "() or " + shape_str(std::vector<std::size_t>{L}) + " (L)",
                         g);
    for (auto v : lens)
        if (v < 0) throw value_error("MultiheadAttention: valid_lens must be >= 0, got " + std::to_string(v));
}

}  // namespace detail
}  // namespace xgrad::nn
