// Activation patching and attribution patching on nn::GPT, through its hook points (docs/hooks.md):
//
//   activation_patching(model, from, into, metric): the metric of the run on `into` with one
//     activation taken from the run on `from`, for every patch: each head's z (all positions, and
//     each position), and resid_pre, attn_out and mlp_out at each layer and position. Denoising is
//     from the clean ids into the corrupted ones; noising the other way. The patched runs are
//     batched: the `into` rows repeated once per patch, up to max_rows rows a forward.
//   attribution_patching(model, from, into, metric): AtP's estimate of each of those patches' effect
//     (patched metric − the `into` run's metric) from one forward on `from` and one forward and
//     backward on `into`: (a_from − a_into) · dmetric/da at the `into` run, summed over the patched
//     elements (every batch row).
//
// The metric is the mean over the batch of the logit difference (correct − wrong token at the last
// position) or nanoGPT's loss. The model runs as it is: call set_training(model, false) first.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/core/hooks.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::patching {

using Ids = xt::xtensor<std::int64_t, 2>;

struct Metric {
    enum class Kind { logit_diff, loss } kind = Kind::logit_diff;
    std::vector<std::int64_t> correct{}, wrong{};  // logit_diff: a token per batch row, at position T − 1
    Ids targets{};                                 // loss: (B, T), −1 ignored
};

// What a patching method gives: the two runs' metrics and one value per patch.
struct Result {
    double from = 0, into = 0;            // the metric of the unpatched runs
    xt::xtensor<double, 2> head;          // (L, H): attn.hook_z of the head, every position
    xt::xtensor<double, 3> head_pos;      // (L, H, T): the same at one position
    xt::xtensor<double, 2> resid_pre;     // (L, T): blocks.{l}.hook_resid_pre at one position
    xt::xtensor<double, 2> attn_out;      // (L, T)
    xt::xtensor<double, 2> mlp_out;       // (L, T)
};

namespace detail {
// The metric's tokens (or targets) fit ids of `shape` and a vocabulary of `vocab`.
inline void check_metric(const char* method, const Metric& m, const std::array<std::size_t, 2>& shape, std::size_t vocab) {
    const std::size_t B = shape[0];
    if (m.kind == Metric::Kind::loss) {
        if (m.targets.shape() != shape)
            throw shape_error(std::string(method) + ": targets " + shape_str(m.targets.shape()) + " for ids " +
                              shape_str(shape));
        return;
    }
    if (m.correct.size() != B || m.wrong.size() != B)
        throw shape_error(std::string(method) + ": " + std::to_string(m.correct.size()) + " correct and " +
                          std::to_string(m.wrong.size()) + " wrong tokens for a batch of " + std::to_string(B));
    for (std::size_t b = 0; b < B; ++b)
        if (m.correct[b] < 0 || m.wrong[b] < 0 || std::size_t(m.correct[b]) >= vocab || std::size_t(m.wrong[b]) >= vocab)
            throw value_error(std::string(method) + ": a token of row " + std::to_string(b) + " is not in [0, " +
                              std::to_string(vocab) + ")");
}
// The two runs of the same shape, the metric fitting them.
inline void check_runs(const char* method, const Ids& from, const Ids& into, const Metric& m, std::size_t vocab) {
    if (from.shape() != into.shape())
        throw shape_error(std::string(method) + ": the two runs' ids have shapes " + shape_str(from.shape()) + " and " +
                          shape_str(into.shape()));
    check_metric(method, m, into.shape(), vocab);
}
}  // namespace detail

// The metric on the tape, for its gradient: logits (B, T, V).
template <Real T>
Var<T, 0> metric(const Var<T, 3>& logits, const Metric& m) {
    const std::size_t B = logits.shape(0), L = logits.shape(1), V = logits.shape(2);
    detail::check_metric("patching::metric", m, {B, L}, V);
    if (m.kind == Metric::Kind::loss) return nn::gpt_loss(logits, m.targets);
    xt::xtensor<T, 3> sign = xt::zeros<T>({B, std::size_t(1), V});  // +1 at the correct token, −1 at the wrong one
    for (std::size_t b = 0; b < B; ++b)
        sign(b, 0, std::size_t(m.correct[b])) += T(1), sign(b, 0, std::size_t(m.wrong[b])) -= T(1);
    const Var<T, 3> last = slice(logits, 1, long(L) - 1, long(L));  // (B, 1, V)
    return sum(last * constant(std::move(sign))) * T(1.0 / double(B));
}

// The metric of each group of B rows of logits (G·B, T, V): the patched runs of one forward.
template <Real T>
std::vector<double> group_metrics(const xt::xtensor<T, 3>& logits, const Metric& m, std::size_t B) {
    const std::size_t G = logits.shape()[0] / B, L = logits.shape()[1], V = logits.shape()[2];
    std::vector<double> out(G, 0.0);
    for (std::size_t g = 0; g < G; ++g) {
        double total = 0;
        std::size_t count = 0;
        for (std::size_t b = 0; b < B; ++b) {
            const T* row = &logits(g * B + b, 0, 0);
            if (m.kind == Metric::Kind::logit_diff) {
                const T* last = row + (L - 1) * V;
                total += double(last[m.correct[b]]) - double(last[m.wrong[b]]), ++count;
                continue;
            }
            for (std::size_t t = 0; t < L; ++t) {  // cross-entropy of each kept target
                const std::int64_t y = m.targets(b, t);
                if (y < 0) continue;
                const T* z = row + t * V;
                double top = double(z[0]), sum = 0;
                for (std::size_t v = 1; v < V; ++v) top = std::max(top, double(z[v]));
                for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - top);
                total += top + std::log(sum) - double(z[y]), ++count;
            }
        }
        out[g] = count ? total / double(count) : 0.0;
    }
    return out;
}

namespace detail {

// One patch: an index per axis of the hooked value without its batch axis (−1: all of the axis).
template <std::size_t N>
using Patch = std::array<long, N - 1>;

// The metric of the run on `into` with each patch of `point` taken from `from_value` (B, ...), the
// patched runs batched up to max_rows rows a forward.
template <std::size_t N, Real T>
std::vector<double> sweep(const nn::GPT<T>& model, const Ids& into, const Metric& m, const std::string& point,
                          const xt::xtensor<T, N>& from_value, const std::vector<Patch<N>>& patches,
                          std::size_t max_rows) {
    const std::size_t B = into.shape()[0], L = into.shape()[1], per_row = from_value.size() / B;
    const std::size_t group = std::max<std::size_t>(1, max_rows / B);
    std::vector<double> out;
    const NoGrad no_grad;
    for (std::size_t first = 0; first < patches.size(); first += group) {
        const std::size_t G = std::min(group, patches.size() - first);
        Ids ids({G * B, L});  // the `into` rows once per patch
        for (std::size_t g = 0; g < G; ++g) std::copy(into.begin(), into.end(), ids.begin() + long(g * B * L));
        Hooks hooks;
        hooks.forward(point, [&](const Var<T, N>& value) {
            xt::xtensor<T, N> source = xt::xtensor<T, N>::from_shape(value.shape());
            xt::xtensor<bool, N> mask = xt::zeros<bool>(value.shape());
            for (std::size_t g = 0; g < G; ++g) {
                std::copy(from_value.begin(), from_value.end(), source.begin() + long(g * B * per_row));
                xt::xstrided_slice_vector slices{xt::range(g * B, (g + 1) * B)};
                for (const long i : patches[first + g])
                    i < 0 ? slices.push_back(xt::all()) : slices.push_back(std::size_t(i));
                xt::strided_view(mask, slices) = true;
            }
            return Var<T, N>(where(mask, constant(std::move(source)), value));
        });
        const UseHooks use(hooks);
        const auto values = group_metrics(model(ids).value(), m, B);
        out.insert(out.end(), values.begin(), values.end());
    }
    return out;
}

inline std::string block_point(std::size_t l, const char* name) { return "blocks." + std::to_string(l) + "." + name; }

// The points the methods patch, kept by `cache` (with their gradients, asked).
inline void keep_patched_points(ActivationCache& cache, Hooks& hooks, bool gradients) {
    for (const char* point : {"blocks.*.attn.hook_z", "blocks.*.hook_resid_pre", "blocks.*.hook_attn_out",
                              "blocks.*.hook_mlp_out"})
        cache.attach(hooks, point, gradients);
}

}  // namespace detail

namespace detail {

// AtP's estimate for each patch: (from − into) · grad summed over the patched elements, every row.
template <std::size_t N, Real T>
std::vector<double> attribute(const xt::xtensor<T, N>& from, const xt::xtensor<T, N>& into,
                              const xt::xtensor<T, N>& grad, const std::vector<Patch<N>>& patches) {
    xt::xtensor<double, N> terms = xt::cast<double>(from) - xt::cast<double>(into);
    terms *= xt::cast<double>(grad);
    std::vector<double> out;
    for (const auto& patch : patches) {
        xt::xstrided_slice_vector slices{xt::all()};
        for (const long i : patch) i < 0 ? slices.push_back(xt::all()) : slices.push_back(std::size_t(i));
        out.push_back(xt::sum(xt::strided_view(terms, slices))());
    }
    return out;
}

// The patches both methods make, with where their values go: f(point, patches, destination) per
// layer for attn.hook_z by head and by head and position, then resid_pre, attn_out and mlp_out by
// position; destination receives one value per patch, in order.
template <class F>
void for_each_patch_set(std::size_t layers, std::size_t heads, std::size_t positions, Result& r, F f) {
    r.head = xt::zeros<double>({layers, heads}), r.head_pos = xt::zeros<double>({layers, heads, positions});
    r.resid_pre = r.attn_out = r.mlp_out = xt::zeros<double>({layers, positions});
    std::vector<Patch<4>> by_head, by_head_pos;  // z (B, T, H, D) without B: (T, H, D); head_pos (L, H, T)
    for (std::size_t h = 0; h < heads; ++h) {
        by_head.push_back({-1, long(h), -1});
        for (std::size_t t = 0; t < positions; ++t) by_head_pos.push_back({long(t), long(h), -1});
    }
    std::vector<Patch<3>> by_position;
    for (std::size_t t = 0; t < positions; ++t) by_position.push_back({long(t), -1});
    for (std::size_t l = 0; l < layers; ++l) {
        const std::string z = block_point(l, "attn.hook_z");
        f(z, by_head, &r.head(l, 0));
        f(z, by_head_pos, &r.head_pos(l, 0, 0));
        f(block_point(l, "hook_resid_pre"), by_position, &r.resid_pre(l, 0));
        f(block_point(l, "hook_attn_out"), by_position, &r.attn_out(l, 0));
        f(block_point(l, "hook_mlp_out"), by_position, &r.mlp_out(l, 0));
    }
}

}  // namespace detail

template <Real T>
Result activation_patching(const nn::GPT<T>& model, const Ids& from, const Ids& into, const Metric& m,
                           std::size_t max_rows = 256) {
    detail::check_runs("activation_patching", from, into, m, model.config.vocab_size);
    ActivationCache cache;
    Hooks keep;
    detail::keep_patched_points(cache, keep, false);
    Result r;
    {
        const NoGrad no_grad;
        {
            const UseHooks use(keep);
            r.from = group_metrics(model(from).value(), m, from.shape()[0])[0];
        }
        r.into = group_metrics(model(into).value(), m, into.shape()[0])[0];
    }
    detail::for_each_patch_set(model.config.n_layer, model.config.n_head, into.shape()[1], r,
                               [&](const std::string& point, const auto& patches, double* out) {
                                   constexpr std::size_t N = std::tuple_size_v<typename std::decay_t<decltype(patches)>::value_type> + 1;
                                   const auto values = detail::sweep<N>(model, into, m, point, cache.value<T, N>(point),
                                                                        patches, max_rows);
                                   std::copy(values.begin(), values.end(), out);
                               });
    return r;
}

template <Real T>
Result attribution_patching(const nn::GPT<T>& model, const Ids& from, const Ids& into, const Metric& m) {
    detail::check_runs("attribution_patching", from, into, m, model.config.vocab_size);
    ActivationCache from_cache, into_cache;
    Hooks keep_from, keep_into;
    detail::keep_patched_points(from_cache, keep_from, false);
    detail::keep_patched_points(into_cache, keep_into, true);
    Result r;
    {
        const NoGrad no_grad;
        const UseHooks use(keep_from);
        r.from = group_metrics(model(from).value(), m, from.shape()[0])[0];
    }
    Var<T, 0> value;
    {
        const UseHooks use(keep_into);
        value = metric(model(into), m);
    }
    backward(value);
    r.into = double(value.value()());
    detail::for_each_patch_set(model.config.n_layer, model.config.n_head, into.shape()[1], r,
                               [&](const std::string& point, const auto& patches, double* out) {
                                   constexpr std::size_t N = std::tuple_size_v<typename std::decay_t<decltype(patches)>::value_type> + 1;
                                   const auto values = detail::attribute<N>(from_cache.value<T, N>(point),
                                                                            into_cache.value<T, N>(point),
                                                                            into_cache.grad<T, N>(point), patches);
                                   std::copy(values.begin(), values.end(), out);
                               });
    return r;
}

}  // namespace xgrad::patching
