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

// One merged mask over the scores (N·H·L rows of S'), stored as (rows / group, S'): each stored row
// serves `group` consecutive score rows. A key_padding_mask alone needs one row per sequence
// (group H·L); any other mask one per score row (group 1).
template <Real T>
struct MaskRows {
    std::vector<T> stored;  // a vector: sized down and up again across calls, it keeps its capacity
    std::size_t width = 0;  // S'
    std::size_t group = 1;
    bool used = false;  // in this call
    const T* row(std::size_t score_row) const { return used ? stored.data() + (score_row / group) * width : nullptr; }
};

// Keys [begin, end) of a head's score rows; outside it every row of the head ignores every key.
// holes: some row ignores a key inside it too (the softmax must still apply the ignore mask).
struct KeyRange {
    std::size_t begin = 0, end = 0;
    bool holes = false;
    std::size_t size() const { return end - begin; }
};

// The masks of one MHA call, merged as torch does (bool -> ignore, float -> added; bias_k and
// add_zero_attn columns, j >= S, are never masked). The buffers are kept by the attention node
// across steps; reset() starts a call without freeing them.
template <Real T>
struct ScoreMasks {
    std::array<std::size_t, 3> shape{};  // of the scores: (N·H, L, S')
    MaskRows<T> ignore;    // 1 = ignore, 0 = keep (in T, so the softmax reads it with SIMD)
    MaskRows<T> additive;  // added to the scores

    void reset(const std::array<std::size_t, 3>& s) {
        shape = s;
        ignore.used = additive.used = false;
    }
    // m's stored rows, for a writer that needs at most `group` score rows per stored row: zero on
    // first use in this call; rows stored coarser are first repeated to that group. The stored group
    // may stay finer than asked (m.group).
    T* for_writing(MaskRows<T>& m, std::size_t group) {
        const std::size_t score_rows = shape[0] * shape[1], Sp = shape[2];
        if (!m.used) {
            m.stored.assign(score_rows / group * Sp, T(0));
            m.width = Sp, m.group = group, m.used = true;
        } else if (group < m.group) {
            auto& coarse = row_scratch(m.stored.size());
            std::copy(m.stored.begin(), m.stored.end(), coarse.begin());
            m.stored.resize(score_rows / group * Sp);
            for (std::size_t r = 0; r < score_rows / group; ++r)
                std::copy_n(coarse.begin() + (r * group / m.group) * Sp, Sp, m.stored.begin() + r * Sp);
            m.group = group;
        }
        return m.stored.data();
    }
    // The keys some row of score rows [first, first + count) does not ignore: from the first key
    // one of them keeps to the last (empty when they ignore every key), and whether a row ignores
    // one inside. Each stored row serving them (one for a key_padding_mask) is scanned from its
    // ends inward, the scans stopping when the range is whole (a causal mask: the last row keeps
    // every key), then inside the range until an ignored key is found (a causal mask: at once).
    KeyRange live_keys(std::size_t first, std::size_t count) const {
        const std::size_t S = shape[2];
        if (!ignore.used) return {0, S};
        if (count == 0) return {0, 0};
        const std::size_t rows_begin = first / ignore.group, rows_end = (first + count - 1) / ignore.group + 1;
        const auto row = [&](std::size_t stored_row) { return ignore.stored.data() + stored_row * ignore.width; };
        std::size_t begin = S, end = 0;
        for (std::size_t r = rows_end; r-- > rows_begin && end < S;) {
            std::size_t j = S;
            while (j > end && row(r)[j - 1] != T(0)) --j;
            end = std::max(end, j);
        }
        for (std::size_t r = rows_begin; r < rows_end && begin > 0; ++r) {
            std::size_t j = 0;
            while (j < begin && row(r)[j] != T(0)) ++j;
            begin = std::min(begin, j);
        }
        if (begin >= end) return {0, 0};
        bool holes = false;
        for (std::size_t r = rows_begin; r < rows_end && !holes; ++r)
            holes = std::any_of(row(r) + begin, row(r) + end, [](T v) { return v != T(0); });
        return {begin, end, holes};
    }
    // scratch space, kept across calls
    std::vector<T>& row_scratch(std::size_t size) {
        if (scratch.size() < size) scratch.resize(size);
        return scratch;
    }

private:
    std::vector<T> scratch;
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

// Calls f(stored_row, mask_row) for every stored row of `rows`: mask_row is the mask's S entries
// for its score rows. layout: 'k' key_padding_mask (N, S) / (S); 'a' attn_mask (L, S) or (N·H, L, S).
template <class V, Real T, class F>
void for_each_mask_row(const xt::xarray<V>& m, char layout, const MaskGeometry& g, const MaskRows<T>& rows, F f) {
    const std::size_t L = g.tgt_len, S = g.src_len;
    const bool per_batch_head = layout == 'a' && m.dimension() == 3;
    for (std::size_t s = 0; s < g.batch * g.heads * L / rows.group; ++s) {
        const std::size_t b = s * rows.group / L, i = s * rows.group % L;  // its first score row
        const std::size_t row = layout == 'k' ? b / g.heads : per_batch_head ? b * L + i : i;
        f(s, m.data() + row * S);
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
    // score rows one mask row serves (at least 1: L may be 0)
    const std::size_t group = layout == 'k' ? std::max<std::size_t>(1, g.heads * g.tgt_len) : 1;
    if (m.ignore) {
        check_mask_shape(*m.ignore, layout, operand, "bool", g);
        T* p = out.for_writing(out.ignore, group);
        // each distinct mask row converted to T once, then merged by a loop that vectorizes
        T* converted = out.row_scratch(g.src_len).data();
        const bool* last = nullptr;
        for_each_mask_row(*m.ignore, layout, g, out.ignore, [&](std::size_t s, const bool* v) {
            if (v != last) std::transform(v, v + g.src_len, converted, [](bool x) { return T(x); }), last = v;
            T* row = p + s * Sp;
            for (std::size_t j = 0; j < g.src_len; ++j) row[j] = std::max(row[j], converted[j]);
        });
    }
    if (m.additive) {
        check_mask_shape(*m.additive, layout, operand, "float", g);
        T* p = out.for_writing(out.additive, group);
        for_each_mask_row(*m.additive, layout, g, out.additive, [&](std::size_t s, const T* v) {
            T* row = p + s * Sp;
            for (std::size_t j = 0; j < g.src_len; ++j) row[j] += v[j];
        });
    }
}

// Ignores key j > query i (is_causal without attn_mask) or key j >= valid_len (d2l's valid_lens,
// (N) / (N, L) batched, () / (L) unbatched).
template <Real T, class Ignored>
void merge_ignore_rule(ScoreMasks<T>& out, const MaskGeometry& g, Ignored ignored) {
    const std::size_t L = g.tgt_len, Sp = g.padded_src_len;
    T* p = out.for_writing(out.ignore, 1);
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
