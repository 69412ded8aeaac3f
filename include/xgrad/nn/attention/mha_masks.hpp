// MultiheadAttention's masks (torch.nn.MultiheadAttention's shapes) checked against its inputs
// and merged over its scores (N, H, L, S') by the one mask merge, kernels/score_masks.hpp:
//   key_padding_mask (N, S) / (S)                      read as (N, 1, 1, S)
//   attn_mask (L, S), or (N·H, L, S) / (H, L, S)       read as (1, 1, L, S) or (N, H, L, S)
//   attn_mask per sequence (N, L, S) / (1, L, S)       read as (N, 1, L, S): the heads of sequence n
//                                                      share mask[n] (3DETR's masks, not tiled)
//   is_causal (no attn_mask): key j > query i ignored; valid_lens (N) / (N, L): keys j >= len
// Masks cover the S given keys; keys [S, S') (bias_k, zero attention) are never masked.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>

#include "xgrad/core/var.hpp"
#include "xgrad/kernels/score_masks.hpp"
#include "xgrad/ops/mask.hpp"

namespace xgrad::nn::detail {

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
    std::array<std::size_t, 4> scores() const { return {batch, heads, tgt_len, padded_src_len}; }
};

template <class S>
std::string dyn_shape_str(const S& s) {
    return shape_str(std::vector<std::size_t>(s.begin(), s.end()));
}

template <class S>
bool shape_is(const S& s, std::initializer_list<std::size_t> want) {
    return s.size() == want.size() && std::equal(want.begin(), want.end(), s.begin());
}

[[noreturn]] inline void mask_shape_error(const std::string& operand, const std::string& got, const std::string& want,
                                          const MaskGeometry& g) {
    throw shape_error("MultiheadAttention: " + operand + " has shape " + got + " but expected " + want + " for " +
                      g.inputs());
}

// How a MultiheadAttention mask covers the scores (N, H, L, S).
enum class MaskLayout {
    key_padding,   // key_padding_mask (N, S) / (S): a row of keys per sequence
    attention,     // attn_mask (L, S) for every head, or (N·H, L, S) / (H, L, S) one per head
    per_sequence,  // attn_mask (N, L, S) / (1, L, S): one per sequence, shared by its heads
};

// Checks a mask of the given layout against the inputs; the view it is read through over the
// scores' leading axes (N, H, L).
template <Real T>
std::array<std::size_t, 3> mask_view(const AnyMask<T>& m, MaskLayout layout, const char* operand,
                                     const MaskGeometry& g) {
    const std::size_t N = g.batch, H = g.heads, L = g.tgt_len, S = g.src_len;
    const auto& s = m.shape();
    auto fail = [&](const std::string& want) {
        mask_shape_error(std::string(operand) + " (" + m.name() + ")", dyn_shape_str(s), want, g);
    };
    using dims = std::vector<std::size_t>;
    if (layout == MaskLayout::key_padding) {
        if (g.batched ? !shape_is(s, {N, S}) : !shape_is(s, {S}))
            fail(g.batched ? shape_str(dims{N, S}) + " (N, S)" : shape_str(dims{S}) + " (S)");
        return {N, 1, 1};
    }
    if (layout == MaskLayout::per_sequence) {
        if (!shape_is(s, {N, L, S})) fail(shape_str(dims{N, L, S}) + " (N, L, S): one mask per sequence");
        return {N, 1, L};
    }
    if (shape_is(s, {L, S})) return {1, 1, L};
    if (!shape_is(s, {N * H, L, S}))
        fail(shape_str(dims{L, S}) + " (L, S) or " + shape_str(dims{N * H, L, S}) +
             (g.batched ? " (N*num_heads, L, S)" : " (num_heads, L, S)"));
    return {N, H, L};
}

inline void check_valid_lens(const xt::xarray<std::int64_t>& lens, const MaskGeometry& g) {
    const std::size_t N = g.batch, L = g.tgt_len;
    const auto& s = lens.shape();
    const bool ok = g.batched ? shape_is(s, {N}) || shape_is(s, {N, L}) : shape_is(s, {}) || shape_is(s, {L});
    using dims = std::vector<std::size_t>;
    if (!ok)
        mask_shape_error("valid_lens", dyn_shape_str(s),
                         g.batched ? shape_str(dims{N}) + " (N) or " + shape_str(dims{N, L}) + " (N, L)"
                                   : "() or " + shape_str(dims{L}) + " (L)",
                         g);
    for (auto v : lens)
        if (v < 0) throw value_error("MultiheadAttention: valid_lens must be >= 0, got " + std::to_string(v));
}

// The masks of one MultiheadAttention call, checked; merge() fills a node's ScoreMasks from them.
template <Real T>
struct MhaMasks {
    const AnyMask<T>& key_padding_mask;
    const AnyMask<T>& attn_mask;
    bool attn_mask_per_sequence;  // (N, L, S), shared by the heads of each sequence
    bool causal;  // is_causal without an attn_mask
    const xt::xarray<std::int64_t>* valid_lens;
    MaskGeometry geometry;
    std::array<std::size_t, 3> kpm_view{}, attn_view{};

    void check() {
        if (key_padding_mask) kpm_view = mask_view(key_padding_mask, MaskLayout::key_padding, "key_padding_mask", geometry);
        if (attn_mask)
            attn_view = mask_view(attn_mask, attn_mask_per_sequence ? MaskLayout::per_sequence : MaskLayout::attention,
                                  "attn_mask", geometry);
        if (valid_lens) check_valid_lens(*valid_lens, geometry);
    }
    void merge(kernels::ScoreMasks<T>& out) const {
        const MaskGeometry& g = geometry;
        out.reset(g.scores());
        if (key_padding_mask) xgrad::detail::merge_any(out, key_padding_mask, kpm_view, g.src_len);
        if (attn_mask) xgrad::detail::merge_any(out, attn_mask, attn_view, g.src_len);
        if (causal) kernels::merge_causal(out, g.src_len);
        if (valid_lens) {  // (N) or (N, L): read as (N, 1, 1) or (N, 1, L)
            const bool per_query = valid_lens->dimension() == (g.batched ? 2u : 1u);
            const std::array<std::size_t, 3> view{g.batch, 1, per_query ? g.tgt_len : 1};
            kernels::merge_valid_lens(out, valid_lens->data(), view, g.src_len);
        }
    }
};

}  // namespace xgrad::nn::detail
