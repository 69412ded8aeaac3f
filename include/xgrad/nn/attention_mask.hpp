// Masks of nn::MultiheadAttention (PyTorch's MHA meaning: a bool mask is true = IGNORE, a float
// mask is ADDED to the scores), and how they become one mask over the scores (N·H, L, S').
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
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
// add_zero_attn columns, j >= S, are never masked): each (N·H, L, S') when in use. The buffers are
// kept by the attention node across steps; reset() starts a call without freeing them.
template <Real T>
struct ScoreMasks {
    std::array<std::size_t, 3> shape{};  // (N·H, L, S')
    xt::xtensor<T, 3> ignore;  // 1 = ignore, 0 = keep (in T, so the softmax reads it with SIMD)
    xt::xtensor<T, 3> additive;
    bool has_ignore = false, has_additive = false;

    void reset(const std::array<std::size_t, 3>& s) {
        shape = s;
        has_ignore = has_additive = false;
    }
    // The buffers, all false / zero on the first use of this call.
    T* ignore_for_writing() {
        if (!has_ignore) start(ignore, T(0)), has_ignore = true;
        return ignore.data();
    }
    T* additive_for_writing() {
        if (!has_additive) start(additive, T(0)), has_additive = true;
        return additive.data();
    }

    // S entries of scratch space, kept across calls
    T* row_scratch(std::size_t S) {
        if (scratch.size() < S) scratch.resize(S);
        return scratch.data();
    }

private:
    std::vector<T> scratch;
    template <class A, class V>
    void start(A& a, V fill) {
        if (a.shape() != shape) a.resize(shape);
        std::fill(a.begin(), a.end(), fill);
    }
};

// The sizes a mask is checked against, and how to describe them in an error.
struct MaskGeometry {
    std::size_t batch, heads, tgt_len, src_len, padded_src_len;  // N, H, L, S, S'
    bool batched;
    std::array<std::size_t, 3> query_shape, key_shape;  // as given (rank 2 when unbatched)
    // "query (3, 2, 4) and key (2, 2, 4)", for errors only (a steady forward builds no strings)
    std::string inputs() const {
        const std::size_t rank = batched ? 3 : 2;
        return "query " + shape_str(std::vector<std::size_t>(query_shape.begin(), query_shape.begin() + rank)) +
               " and key " + shape_str(std::vector<std::size_t>(key_shape.begin(), key_shape.begin() + rank));
    }
};

template <class S>
std::string dyn_shape_str(const S& s) {
    return shape_str(std::vector<std::size_t>(s.begin(), s.end()));
}

template <class A>
bool shape_is(const A& a, std::initializer_list<std::size_t> want) {
    return a.dimension() == want.size() && std::equal(want.begin(), want.end(), a.shape().begin());
}

[[noreturn]] inline void mask_shape_error(const std::string& operand, const std::string& got, const std::string& want,
                                          const MaskGeometry& g) {
    throw shape_error("MultiheadAttention: " + operand + " has shape " + got + " but expected " + want + " for " +
                      g.inputs());
}

// Calls f(b, i, j, value) for every score position (b = n·H + h, i < L, j < S) a mask covers.
// layout: 'k' key_padding_mask (N, S) / (S); 'a' attn_mask (L, S) or (N·H, L, S).
// Calls f(b, i, mask_row) for every score row (b = n·H + h, i < L): mask_row is the mask's S entries
// that apply to it. layout: 'k' key_padding_mask (N, S) / (S); 'a' attn_mask (L, S) or (N·H, L, S).
template <class V, class F>
void for_each_mask_row(const xt::xarray<V>& m, char layout, const MaskGeometry& g, F f) {
    const std::size_t L = g.tgt_len, S = g.src_len;
    const bool per_batch_head = layout == 'a' && m.dimension() == 3;
    for (std::size_t b = 0; b < g.batch * g.heads; ++b)
        for (std::size_t i = 0; i < L; ++i) {
            const std::size_t row = layout == 'k' ? b / g.heads : per_batch_head ? b * L + i : i;
            f(b, i, m.data() + row * S);
        }
}

template <class A>
void check_mask_shape(const A& m, char layout, const char* operand, const char* kind, const MaskGeometry& g) {
    const std::size_t N = g.batch, L = g.tgt_len, S = g.src_len;
    auto fail = [&](const std::string& want) {
        mask_shape_error(std::string(operand) + " (" + kind + ")", dyn_shape_str(m.shape()), want, g);
    };
    using dims = std::vector<std::size_t>;
    if (layout == 'k') {
        if (g.batched ? !shape_is(m, {N, S}) : !shape_is(m, {S}))
            fail(g.batched ? shape_str(dims{N, S}) + " (N, S)" : shape_str(dims{S}) + " (S)");
    } else if (!shape_is(m, {L, S}) && !shape_is(m, {N * g.heads, L, S})) {
        fail(shape_str(dims{L, S}) + " (L, S) or " + shape_str(dims{N * g.heads, L, S}) +
             (g.batched ? " (N*num_heads, L, S)" : " (num_heads, L, S)"));
    }
}

template <Real T>
void merge_mask(ScoreMasks<T>& out, const AttentionMask<T>& m, char layout, const char* operand,
                const MaskGeometry& g) {
    const std::size_t Sp = g.padded_src_len;
    if (m.ignore) {
        check_mask_shape(*m.ignore, layout, operand, "bool", g);
        T* p = out.ignore_for_writing();
        // each distinct mask row converted to T once (a key_padding_mask row serves H·L score rows),
        // then merged by a loop that vectorizes
        T* converted = out.row_scratch(g.src_len);
        const bool* last = nullptr;
        for_each_mask_row(*m.ignore, layout, g, [&](std::size_t b, std::size_t i, const bool* v) {
            if (v != last) std::transform(v, v + g.src_len, converted, [](bool x) { return T(x); }), last = v;
            T* row = p + (b * g.tgt_len + i) * Sp;
            for (std::size_t j = 0; j < g.src_len; ++j) row[j] = std::max(row[j], converted[j]);
        });
    }
    if (m.additive) {
        check_mask_shape(*m.additive, layout, operand, "float", g);
        T* p = out.additive_for_writing();
        for_each_mask_row(*m.additive, layout, g, [&](std::size_t b, std::size_t i, const T* v) {
            T* row = p + (b * g.tgt_len + i) * Sp;
            for (std::size_t j = 0; j < g.src_len; ++j) row[j] += v[j];
        });
    }
}

// Ignores key j > query i (is_causal without attn_mask) or key j >= valid_len (d2l's valid_lens,
// (N) / (N, L) batched, () / (L) unbatched).
template <Real T, class Ignored>
void merge_ignore_rule(ScoreMasks<T>& out, const MaskGeometry& g, Ignored ignored) {
    const std::size_t L = g.tgt_len, Sp = g.padded_src_len;
    T* p = out.ignore_for_writing();
    for (std::size_t b = 0; b < g.batch * g.heads; ++b)
        for (std::size_t i = 0; i < L; ++i)
            for (std::size_t j = 0; j < g.src_len; ++j)
                if (ignored(b / g.heads, i, j)) p[(b * L + i) * Sp + j] = T(1);
}

inline void check_valid_lens(const xt::xarray<std::int64_t>& lens, const MaskGeometry& g) {
    const std::size_t N = g.batch, L = g.tgt_len;
    const bool ok = g.batched ? shape_is(lens, {N}) || shape_is(lens, {N, L}) : shape_is(lens, {}) || shape_is(lens, {L});
    using dims = std::vector<std::size_t>;
    if (!ok)
        mask_shape_error("valid_lens", dyn_shape_str(lens.shape()),
                         g.batched ? shape_str(dims{N}) + " (N) or " + shape_str(dims{N, L}) + " (N, L)"
                                   : "() or " + shape_str(dims{L}) + " (L)",
                         g);
    for (auto v : lens)
        if (v < 0) throw value_error("MultiheadAttention: valid_lens must be >= 0, got " + std::to_string(v));
}

}  // namespace detail
}  // namespace xgrad::nn
