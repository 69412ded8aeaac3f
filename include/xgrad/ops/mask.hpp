// Masks for masked_softmax. Each mask type says what its entries MEAN, because PyTorch is not
// consistent: nn.MultiheadAttention's bool masks mark positions to IGNORE (True = masked out), while
// F.scaled_dot_product_attention's bool attn_mask marks positions to ATTEND (True = kept).
//
//   masked_softmax(scores, ignore_mask(pad))        // nn.MultiheadAttention attn_mask / key_padding_mask
//   masked_softmax(scores, keep_mask(allowed))      // F.scaled_dot_product_attention bool attn_mask
//   masked_softmax(scores, additive_mask(bias))     // F.scaled_dot_product_attention float attn_mask
//   masked_softmax(scores, causal)                  // is_causal=True: torch.ones(L, S).tril()
//   masked_softmax(scores, valid_lens(lens))        // d2l: keys k >= valid_len are masked
//   masked_softmax(scores, ignore_mask(pad), causal)  // masks combine: a position masked by any is masked
// The same makers give MultiheadAttention's (and the Transformer layers') key_padding_mask and
// attn_mask, held by AnyMask: opts.key_padding_mask = ignore_mask(pad); and valid lengths are
// valid_lens(lens) everywhere: masked_softmax, scaled_dot_product_attention, MultiheadAttention's
// opts.valid_lens (held by AnyValidLens), AdditiveAttention's forward.
#pragma once
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include <xtensor/xarray.hpp>
#include <xtensor/xtensor.hpp>

#include "xgrad/core/compiled.hpp"
#include "xgrad/core/var.hpp"
#include "xgrad/kernels/score_masks.hpp"

namespace xgrad {

// Bool mask of any rank, broadcast (numpy rules) to the scores: true = IGNORE this position.
struct IgnoreMask {
    xt::xarray<bool> mask;
};
// Bool mask of any rank, broadcast (numpy rules) to the scores: true = KEEP (attend to) this position.
struct KeepMask {
    xt::xarray<bool> mask;
};
// Added to the scores before the softmax, broadcast (numpy rules); -inf ignores a position.
// The bias is a constant: no gradient flows into it.
template <Real T>
struct AdditiveMask {
    xt::xarray<T> bias;
};
// Over the last two axes (L, S) of the scores, key j > query i is ignored (top-left aligned).
struct causal_t {};
inline constexpr causal_t causal{};
// Scores (B, ..., S) with lens of the leading shape (B) or (B, Q), ...: per row, keys k >= len are ignored.
template <std::size_t V>
struct ValidLens {
    xt::xtensor<std::int64_t, V> lens;
};

// What a mask's entries mean.
using MaskKind = kernels::MaskKind;

// One mask of any kind, for options that take one (MultiheadAttention's key_padding_mask and
// attn_mask, the Transformer layers' masks): assign ignore_mask(m), keep_mask(m) or
// additive_mask(b) of element type T. Empty: no mask.
// A mask is a constant: its entries are held once and shared by every copy, so passing masks on
// through options (a Transformer's to each layer's to each attention's) allocates nothing.
template <Real T>
class AnyMask {
public:
    AnyMask() = default;
    AnyMask(IgnoreMask m) : kind_(MaskKind::ignore), entries_(make_entries(std::move(m.mask), {})) {}
    AnyMask(KeepMask m) : kind_(MaskKind::keep), entries_(make_entries(std::move(m.mask), {})) {}
    AnyMask(AdditiveMask<T> m) : kind_(MaskKind::additive), entries_(make_entries({}, std::move(m.bias))) {}

    explicit operator bool() const { return entries_ != nullptr; }
    MaskKind kind() const { return kind_; }
    const xt::xarray<bool>& bools() const { return entries().bools; }  // ignore or keep
    const xt::xarray<T>& values() const { return entries().values; }   // additive
    const auto& shape() const { return kind_ == MaskKind::additive ? values().shape() : bools().shape(); }
    // "ignore_mask", "keep_mask" or "additive_mask", for errors
    const char* name() const {
        return kind_ == MaskKind::ignore ? "ignore_mask" : kind_ == MaskKind::keep ? "keep_mask" : "additive_mask";
    }

private:
    struct Entries {
        xt::xarray<bool> bools;
        xt::xarray<T> values;
    };
    static std::shared_ptr<const Entries> make_entries(xt::xarray<bool> bools, xt::xarray<T> values) {
        return std::make_shared<const Entries>(Entries{std::move(bools), std::move(values)});
    }
    const Entries& entries() const {
        static const Entries none{};
        return entries_ ? *entries_ : none;
    }

    MaskKind kind_ = MaskKind::ignore;
    std::shared_ptr<const Entries> entries_;  // null: no mask
};

// Valid lengths of any rank, for options that take them (MultiheadAttention's valid_lens): assign
// valid_lens(lens). Empty: none.
class AnyValidLens {
public:
    AnyValidLens() = default;
    AnyValidLens(std::nullopt_t) {}
    template <std::size_t V>
    AnyValidLens(const ValidLens<V>& v) : lens_(v.lens) {}
    explicit AnyValidLens(xt::xarray<std::int64_t> lens) : lens_(std::move(lens)) {}

    explicit operator bool() const { return lens_.has_value(); }
    const xt::xarray<std::int64_t>& lens() const { return *lens_; }
    const xt::xarray<std::int64_t>& operator*() const { return *lens_; }

private:
    std::optional<xt::xarray<std::int64_t>> lens_;
};

namespace detail {

// A fixed-rank xtensor expression (xt::xtensor, or e.g. `xt::equal(tokens, pad_id)`) whose elements satisfy Pred.
template <class E>
concept FixedRankExpression = xt::is_xexpression<std::decay_t<E>>::value &&
                              requires { std::tuple_size<typename std::decay_t<E>::shape_type>::value; };
template <class E>
inline constexpr std::size_t expr_rank = std::tuple_size_v<typename std::decay_t<E>::shape_type>;
template <class E>
using expr_value_t = typename std::decay_t<E>::value_type;

template <class M>
struct is_softmax_mask : std::false_type {};
template <>
struct is_softmax_mask<IgnoreMask> : std::true_type {};
template <>
struct is_softmax_mask<KeepMask> : std::true_type {};
template <Real T>
struct is_softmax_mask<AdditiveMask<T>> : std::true_type {};
template <>
struct is_softmax_mask<causal_t> : std::true_type {};
template <std::size_t V>
struct is_softmax_mask<ValidLens<V>> : std::true_type {};
template <Real T>
struct is_softmax_mask<AnyMask<T>> : std::true_type {};

}  // namespace detail

template <class M>
concept SoftmaxMask = detail::is_softmax_mask<std::remove_cvref_t<M>>::value;

// The makers take any xtensor expression (xt::xtensor, xt::xarray, `xt::equal(tokens, pad_id)`, ...);
// valid_lens a fixed-rank one (its rank is checked against the scores' at compile time).
template <class E>
    requires xt::is_xexpression<std::decay_t<E>>::value
IgnoreMask ignore_mask(E&& m) {
    static_assert(std::same_as<detail::expr_value_t<E>, bool>, "xgrad: ignore_mask needs a bool tensor");
    return {xt::xarray<bool>(std::forward<E>(m))};
}
template <class E>
    requires xt::is_xexpression<std::decay_t<E>>::value
KeepMask keep_mask(E&& m) {
    static_assert(std::same_as<detail::expr_value_t<E>, bool>, "xgrad: keep_mask needs a bool tensor");
    return {xt::xarray<bool>(std::forward<E>(m))};
}
template <class E>
    requires xt::is_xexpression<std::decay_t<E>>::value
auto additive_mask(E&& m) {
    using T = detail::expr_value_t<E>;
    static_assert(std::same_as<T, float> || std::same_as<T, double>,
                  "xgrad: additive_mask needs a float or double tensor");
    return AdditiveMask<T>{xt::xarray<T>(std::forward<E>(m))};
}
template <detail::FixedRankExpression E>
ValidLens<detail::expr_rank<E>> valid_lens(E&& lens) {
    using I = detail::expr_value_t<E>;
    static_assert(std::integral<I> && !std::same_as<I, bool>, "xgrad: valid_lens needs an integer tensor");
    return {xt::xtensor<std::int64_t, detail::expr_rank<E>>(std::forward<E>(lens))};
}
// Of a rank known at run time (xt::xarray): for options that check it then (MultiheadAttention's).
template <class E>
    requires(xt::is_xexpression<std::decay_t<E>>::value && !detail::FixedRankExpression<E>)
AnyValidLens valid_lens(E&& lens) {
    using I = detail::expr_value_t<E>;
    static_assert(std::integral<I> && !std::same_as<I, bool>, "xgrad: valid_lens needs an integer tensor");
    return AnyValidLens(xt::xarray<std::int64_t>(std::forward<E>(lens)));
}

namespace detail {

// One mask of the vocabulary merged into `out`, broadcast to scores of `shape` (kernels/score_masks.hpp).
template <Real T, class Shape>
void merge_mask(kernels::ScoreMasks<T>& out, const IgnoreMask& m, const Shape& shape, const char* op) {
    kernels::merge_broadcast(out, MaskKind::ignore, m.mask, shape, "ignore_mask", op);
}
template <Real T, class Shape>
void merge_mask(kernels::ScoreMasks<T>& out, const KeepMask& m, const Shape& shape, const char* op) {
    kernels::merge_broadcast(out, MaskKind::keep, m.mask, shape, "keep_mask", op);
}
template <Real T, class Shape, class U>
void merge_mask(kernels::ScoreMasks<T>& out, const AdditiveMask<U>& m, const Shape& shape, const char* op) {
    static_assert(std::same_as<T, U>, "xgrad: additive_mask must have the scores' element type (float or double)");
    kernels::merge_broadcast(out, MaskKind::additive, m.bias, shape, "additive_mask", op);
}
// An AnyMask read through `view` (MultiheadAttention's masks, or one broadcast to the scores).
template <Real T>
void merge_any(kernels::ScoreMasks<T>& out, const AnyMask<T>& m, std::span<const std::size_t> view, std::size_t S) {
    const std::size_t width = m.shape().back();
    if (m.kind() == MaskKind::additive) kernels::merge_values(out, m.kind(), m.values().data(), view, S, width);
    else kernels::merge_values(out, m.kind(), m.bools().data(), view, S, width);
}
template <Real T, class Shape>
void merge_mask(kernels::ScoreMasks<T>& out, const AnyMask<T>& m, const Shape& shape, const char* op) {
    if (!m) return;
    const kernels::MaskView view = kernels::broadcast_view(m.shape(), shape, m.name(), op);
    merge_any(out, m, std::span<const std::size_t>(view.data(), shape.size() - 1), shape.back());
}
template <Real T, class Shape>
void merge_mask(kernels::ScoreMasks<T>& out, causal_t, const Shape& shape, const char*) {
    kernels::merge_causal(out, shape.back());
}
// valid_lens of shape (B) or (B, Q): the leading axes of the scores, left-aligned (d2l).
template <Real T, class Shape, std::size_t V>
void merge_mask(kernels::ScoreMasks<T>& out, const ValidLens<V>& v, const Shape& shape, const char* op) {
    if (!std::equal(v.lens.shape().begin(), v.lens.shape().end(), shape.begin()))
        throw shape_error(std::string(op) + ": valid_lens of shape " + shape_str(v.lens.shape()) +
                          " must equal the leading axes of the scores of shape " + shape_str(shape));
    for (std::int64_t len : v.lens)
        if (len < 0) throw value_error(std::string(op) + ": valid_lens holds a negative length " + std::to_string(len));
    kernels::MaskView view;
    view.fill(1);
    std::copy(v.lens.shape().begin(), v.lens.shape().end(), view.begin());
    const std::span<const std::size_t> leading(view.data(), shape.size() - 1);
    kernels::merge_valid_lens(out, v.lens.data(), leading, shape.back());
}

// The masks of a masked_softmax over scores of `shape`, merged; thrown errors name `op`. Per
// thread, reused: a steady step allocates nothing.
template <Real T, class Shape, SoftmaxMask... Masks>
const kernels::ScoreMasks<T>& merged_masks(const Shape& shape, [[maybe_unused]] const char* op,
                                           const Masks&... masks) {
    thread_local kernels::ScoreMasks<T> merged;
    merged.reset(shape);
    (merge_mask(merged, masks, shape, op), ...);
    return merged;
}

}  // namespace detail

}  // namespace xgrad

// Compiled once in libxgrad (xgrad/core/compiled.hpp).
namespace xgrad {
#define XGRAD_DETAIL_MERGE_ANY_COMPILED(EXTERN, T)                                                \
    EXTERN template void detail::merge_any<T>(kernels::ScoreMasks<T>&, const AnyMask<T>&,        \
                                              std::span<const std::size_t>, std::size_t);
XGRAD_COMPILED_IN(kernels, XGRAD_DETAIL_MERGE_ANY_COMPILED)
#undef XGRAD_DETAIL_MERGE_ANY_COMPILED
}  // namespace xgrad
