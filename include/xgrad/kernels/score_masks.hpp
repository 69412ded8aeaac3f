// The score-mask merge of the kernel layer: the masks of one softmax call merged over its scores,
// as the softmax kernels read them (softmax.hpp). masked_softmax and every attention path fill a
// ScoreMasks from the mask vocabulary (ops/mask.hpp's merge_mask, through merge_values, merge_causal
// and merge_valid_lens here), and nothing else turns a mask into scores.
//
// The scores are seen as rows of S' keys, their leading axes (..., L) flattened. A mask is given
// as a view over those leading axes (size 1 = broadcast) and a row of S ≤ S' keys per entry; keys
// [S, S') are never masked (MultiheadAttention's bias_k and zero-attention keys).
//
// Offers: ScoreMasks (the merged ignore and additive rows, and live_keys: the KeyRange some row of
// a run keeps), RowMasks (a run of rows' masks as the rows layout reads them), merge_values (one
// mask's entries read through a view), merge_broadcast (one mask broadcast to the scores),
// merge_causal, merge_valid_lens and broadcast_view.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/kernels/softmax.hpp"

namespace xgrad::kernels {

// What a mask's entries mean: true = ignore the key, true = keep it, or a value added to the score.
enum class MaskKind { ignore, keep, additive };

// The leading axes a mask can be read through, held in arrays: merging allocates nothing.
inline constexpr std::size_t max_mask_axes = 16;
using MaskView = std::array<std::size_t, max_mask_axes>;

// Rows of a merged mask, stored as (rows / group, S'): each stored row serves `group` consecutive
// score rows (a key_padding_mask over (N, H, L, S') needs one row per sequence: group H·L).
template <Real T>
struct MaskRows {
    std::vector<T> stored;  // a vector: sized down and up again across calls, it keeps its capacity
    std::size_t width = 0;  // S'
    std::size_t group = 1;
    bool used = false;  // in this call
    const T* row(std::size_t score_row) const { return used ? stored.data() + (score_row / group) * width : nullptr; }
};

// Keys [begin, end) of a run of score rows; outside it every one of the rows ignores every key.
// holes: some row ignores a key inside it too (the softmax must still apply the ignore mask).
struct KeyRange {
    std::size_t begin = 0, end = 0;
    bool holes = false;
    std::size_t size() const { return end - begin; }
};

// A causal mask kept as its rule, not as rows: query i (the index along the last leading axis)
// ignores keys j > i + offset. Nothing of size rows × S is stored, also beside another ignore mask
// (a key padding: one row per sequence), which is what lets attention at long L keep O(L) memory:
// readers cut each row at keep(i) (RowMasks::kept, apply_masks_columns).
struct CausalRule {
    bool used = false;
    std::size_t offset = 0;
    // keys [0, keep(i)) of query i are kept
    std::size_t keep(std::size_t i, std::size_t S) const { return std::min(S, i + offset + 1); }
};

// The merged masks of one call: 1 = ignore, 0 = keep (in T, so the softmax reads it with SIMD), and
// values added to the scores. Kept by a node across steps: reset() starts a call without freeing.
// A score row's ignored keys are its stored ignore row's and those its causal rule cuts off.
template <Real T>
struct ScoreMasks {
    std::vector<std::size_t> leading;  // the scores' leading axes (..., L): their product is the rows
    std::size_t rows = 0, width = 0;   // score rows, S'
    MaskRows<T> ignore, additive;
    CausalRule causal;

    template <class Shape>
    void reset(const Shape& scores_shape) {
        leading.assign(scores_shape.begin(), scores_shape.end() - 1);
        width = scores_shape.back();
        rows = 1;
        for (std::size_t d : leading) rows *= d;
        ignore.used = additive.used = causal.used = false;
    }
    bool any() const { return ignore.used || additive.used || causal.used; }
    bool ignores() const { return ignore.used || causal.used; }
    // The length of the last leading axis (the queries of the causal rule).
    std::size_t queries() const { return leading.empty() ? 1 : leading.back(); }
    // The keys of a score row that its causal rule keeps: [0, kept_keys), every key without a rule.
    std::size_t kept_keys(std::size_t score_row) const {
        return causal.used ? causal.keep(score_row % queries(), width) : width;
    }
    // Whether score row `score_row` ignores key j (by the rule or the stored rows), for checks and
    // inspection; the kernels read rows.
    bool ignores_key(std::size_t score_row, std::size_t j) const {
        return j >= kept_keys(score_row) || (ignore.used && ignore.row(score_row)[j] != T(0));
    }
    // Sets the causal rule (of two, the one that keeps fewer keys).
    void merge_causal_rule(std::size_t offset) {
        causal = {true, causal.used ? std::min(causal.offset, offset) : offset};
    }
    // m's stored rows, for a writer that needs at most `group` score rows per stored row: zero on
    // first use in this call; rows stored coarser are first repeated to that group. The stored
    // group may stay finer than asked (m.group).
    T* for_writing(MaskRows<T>& m, std::size_t group) {
        if (!m.used) {
            m.stored.assign(rows / group * width, T(0));
            m.width = width, m.group = group, m.used = true;
        } else if (group < m.group) {
            auto& coarse = scratch_of(m.stored.size());
            std::copy(m.stored.begin(), m.stored.end(), coarse.begin());
            m.stored.resize(rows / group * width);
            for (std::size_t r = 0; r < rows / group; ++r)
                std::copy_n(coarse.begin() + (r * group / m.group) * width, width, m.stored.begin() + r * width);
            m.group = group;
        }
        return m.stored.data();
    }
    // The keys some row of score rows [first, first + count) does not ignore: from the first key
    // one of them keeps to the last (empty when they ignore every key), and whether a row ignores
    // one inside. Each stored row serving them (one for a key_padding_mask) is scanned from its
    // ends inward, up to the keys the causal rule lets its rows keep, the scans stopping when the
    // range is whole, then inside the range until an ignored key is found. Under the causal rule
    // alone the range ends after the last key the last query keeps; it has holes when another
    // query keeps fewer.
    KeyRange live_keys(std::size_t first, std::size_t count) const {
        const std::size_t S = width;
        if (count == 0 && ignores()) return {0, 0};
        std::size_t begin = 0, end = keys_kept_by_rule(first, first + count, true);
        bool holes = false;
        if (ignore.used) {
            const std::size_t rows_begin = first / ignore.group, rows_end = (first + count - 1) / ignore.group + 1;
            const auto row = [&](std::size_t stored_row) { return ignore.stored.data() + stored_row * ignore.width; };
            // keys [0, limit(r)): those the rule lets some score row of the run served by row r keep
            const auto limit = [&](std::size_t r) {
                return keys_kept_by_rule(std::max(first, r * ignore.group),
                                         std::min(first + count, (r + 1) * ignore.group), true);
            };
            begin = S, end = 0;
            for (std::size_t r = rows_end; r-- > rows_begin && end < S;) {
                std::size_t j = limit(r);
                while (j > end && row(r)[j - 1] != T(0)) --j;
                end = std::max(end, j);
            }
            for (std::size_t r = rows_begin; r < rows_end && begin > 0; ++r) {
                const std::size_t kept_by_rule = limit(r);
                std::size_t j = 0;
                while (j < std::min(begin, kept_by_rule) && row(r)[j] != T(0)) ++j;
                if (j < kept_by_rule) begin = std::min(begin, j);
            }
            if (begin >= end) return {0, 0};
            for (std::size_t r = rows_begin; r < rows_end && !holes; ++r)
                holes = std::any_of(row(r) + begin, row(r) + end, [](T v) { return v != T(0); });
        }
        if (begin >= end) return {0, 0};
        return {begin, end, holes || keys_kept_by_rule(first, first + count, false) < end};
    }
    // scratch space, kept across calls
    std::vector<T>& scratch_of(std::size_t size) {
        if (scratch.size() < size) scratch.resize(size);
        return scratch;
    }

private:
    std::vector<T> scratch;

    // The keys [0, k) the causal rule lets the score rows [a, b) keep: k of the row with the
    // greatest query (most), or of the least (fewest); all keys without the rule.
    std::size_t keys_kept_by_rule(std::size_t a, std::size_t b, bool most) const {
        if (!causal.used) return width;
        const std::size_t L = queries(), i_a = a % L;
        const bool wraps = i_a + (b - a) > L;  // the rows span heads: they hold queries 0 and L − 1
        const std::size_t i = most ? (wraps ? L - 1 : i_a + (b - a) - 1) : (wraps ? 0 : i_a);
        return causal.keep(i, width);
    }
};

// The masks of score rows first, first + 1, ... in the rows layout (a query per row), over the
// keys `keys` from the range's first key: what softmax_rows and apply_masks_row read for row i.
// The ignore rows only when the range has holes (outside it every key is ignored, and no score is
// stored there); the causal rule as the number of keys kept from the range's first.
template <Real T>
struct RowMasks {
    const ScoreMasks<T>& masks;
    std::size_t first;
    KeyRange keys;

    const T* ignore(std::size_t i) const { return keys.holes ? from_first_key(masks.ignore.row(first + i)) : nullptr; }
    const T* additive(std::size_t i) const { return from_first_key(masks.additive.row(first + i)); }
    const T* from_first_key(const T* row) const { return row ? row + keys.begin : nullptr; }
    // Of row i's n keys (from the range's first), those before the causal rule's cut.
    std::size_t kept(std::size_t i, std::size_t n) const {
        const std::size_t keep = masks.kept_keys(first + i);
        return keep <= keys.begin ? 0 : std::min(n, keep - keys.begin);
    }
    // The masks applied in place to `count` rows of scores over the keys, row i at s + i·lds.
    void apply(T* s, std::size_t count, std::size_t lds) const {
        for (std::size_t i = 0; i < count; ++i) {
            T* row = s + i * lds;
            const std::size_t n = kept(i, keys.size());
            apply_masks_row(row, n, ignore(i), additive(i));
            std::fill(row + n, row + keys.size(), -std::numeric_limits<T>::infinity());
        }
    }
};

// Merges one mask into `target` (out.ignore: 1 = ignore, combined by max; out.additive: summed).
// view: the mask's extent along each leading axis of the scores (that axis's size, or 1 to
// broadcast); fill_row(offset, row) writes the S entries of the mask row at `offset` (its index
// in the view, row-major) into row, in T. A mask row is converted once for every run of score
// rows it serves.
template <Real T, class FillRow>
void merge_rows(ScoreMasks<T>& out, MaskRows<T>& target, std::span<const std::size_t> view, std::size_t S,
                FillRow fill_row) {
    const std::size_t axes = out.leading.size();
    if (axes > max_mask_axes)
        throw value_error("masks: scores of rank " + std::to_string(axes + 1) + " are above the supported " +
                          std::to_string(max_mask_axes + 1));
    MaskView strides{};  // of the view, 0 where it broadcasts
    std::size_t stride = 1, group = 1;
    bool trailing_broadcast = true;
    for (std::size_t k = axes; k-- > 0;) {
        strides[k] = view[k] == 1 ? 0 : stride;
        stride *= view[k];
        if (trailing_broadcast && view[k] == 1) group *= out.leading[k];
        else trailing_broadcast = false;
    }
    group = std::max<std::size_t>(group, 1);  // rows may be 0
    T* stored = out.for_writing(target, group);
    T* converted = out.scratch_of(S).data();
    const bool additive = &target == &out.additive;
    std::size_t last = std::size_t(-1);
    for (std::size_t s = 0; s < out.rows / target.group; ++s) {
        std::size_t offset = 0, r = s * target.group;  // the stored row's first score row
        for (std::size_t k = axes; k-- > 0; r /= out.leading[k]) offset += (r % out.leading[k]) * strides[k];
        if (offset != last) fill_row(offset, converted), last = offset;
        T* row = stored + s * out.width;
        if (additive)
            for (std::size_t j = 0; j < S; ++j) row[j] += converted[j];
        else
            for (std::size_t j = 0; j < S; ++j) row[j] = std::max(row[j], converted[j]);
    }
}

// The view of a mask of shape m_shape broadcast (numpy, right-aligned) to the scores (..., S): its
// leading extents, padded with 1; throws when it does not broadcast, naming op and both shapes.
template <class MShape, class Shape>
MaskView broadcast_view(const MShape& m_shape, const Shape& scores, const char* what, const char* op) {
    const std::size_t M = m_shape.size(), R = scores.size();
    bool ok = M >= 1 && M <= R && R <= max_mask_axes + 1;
    MaskView view;
    view.fill(1);
    for (std::size_t j = 0; ok && j < M; ++j) {
        const std::size_t k = j + (R - M), dm = m_shape[j];
        ok = dm == scores[k] || dm == 1;
        if (k + 1 < R) view[k] = dm;
    }
    if (!ok)
        throw shape_error(std::string(op) + ": " + what + " of shape " + shape_str(m_shape) +
                          " does not broadcast to the scores of shape " + shape_str(scores));
    return view;
}

// ---- the vocabulary: a mask of any kind, given as data and the view it is read through ----

// A bool or additive mask whose entries are rows of `cols` (S, or 1 broadcast over the keys).
template <Real T, class V>
void merge_values(ScoreMasks<T>& out, MaskKind kind, const V* data, std::span<const std::size_t> view, std::size_t S,
                  std::size_t cols) {
    MaskRows<T>& target = kind == MaskKind::additive ? out.additive : out.ignore;
    merge_rows(out, target, view, S, [&](std::size_t offset, T* row) {
        const V* m = data + offset * cols;
        for (std::size_t j = 0; j < S; ++j) {
            const V v = m[cols == 1 ? 0 : j];
            if constexpr (std::same_as<V, bool>) row[j] = T(kind == MaskKind::keep ? !v : v);
            else row[j] = T(v);
        }
    });
}

// causal over the last two leading axes: key j > query i + offset is ignored (top-left aligned when
// offset is 0; a query block that follows `offset` earlier keys, as a key/value cache gives, otherwise).
// S: the mask's keys (≤ the scores' width, the keys past it kept).
template <Real T>
void merge_causal(ScoreMasks<T>& out, std::size_t S, std::size_t offset = 0) {
    // keys [S, width) are never masked (bias_k, add_zero_attn): the rule covers all keys, so it
    // stands for the mask only when S is the width
    if (S == out.width) return out.merge_causal_rule(offset);
    const std::size_t axes = std::min(out.leading.size(), max_mask_axes);
    MaskView view;
    view.fill(1);
    if (axes > 0) view[axes - 1] = out.leading[axes - 1];
    merge_rows(out, out.ignore, std::span<const std::size_t>(view.data(), axes), S, [&](std::size_t i, T* row) {
        for (std::size_t j = 0; j < S; ++j) row[j] = T(j > i + offset);
    });
}

// valid lengths read through `view`: keys j >= len are ignored.
template <Real T>
void merge_valid_lens(ScoreMasks<T>& out, const std::int64_t* lens, std::span<const std::size_t> view, std::size_t S) {
    merge_rows(out, out.ignore, view, S, [&](std::size_t offset, T* row) {
        for (std::size_t j = 0; j < S; ++j) row[j] = T(std::int64_t(j) >= lens[offset]);
    });
}

// The masks of masked_softmax and scaled_dot_product_attention, against scores of `shape`.
template <Real T, class V, class Shape>
void merge_broadcast(ScoreMasks<T>& out, MaskKind kind, const xt::xarray<V>& m, const Shape& shape, const char* what,
                     const char* op) {
    const MaskView view = broadcast_view(m.shape(), shape, what, op);
    merge_values(out, kind, m.data(), std::span<const std::size_t>(view.data(), shape.size() - 1), shape.back(),
                 m.shape().back());
}
}  // namespace xgrad::kernels

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_SCORE_MASKS_COMPILED(EXTERN, T)                                                              \
    EXTERN template void kernels::softmax_rows<false, T, kernels::RowMasks<T>>(                                   \
        T*, std::size_t, std::size_t, std::size_t, kernels::EmptyLine, const kernels::RowMasks<T>&, T*);           \
    EXTERN template void kernels::merge_causal<T>(kernels::ScoreMasks<T>&, std::size_t, std::size_t);            \
    EXTERN template void kernels::merge_valid_lens<T>(kernels::ScoreMasks<T>&, const std::int64_t*,              \
                                                      std::span<const std::size_t>, std::size_t);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_SCORE_MASKS_COMPILED)
#undef XGRAD_DETAIL_SCORE_MASKS_COMPILED
}  // namespace xgrad
