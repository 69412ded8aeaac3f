// The patched runs of activation patching (inspect/patching.hpp, inspect/query_key.hpp): one
// activation of the `into` run replaced, for many patches at once.
//
// A patch in block l changes nothing before block l, and (attention being causal) nothing at the
// positions before the first one it touches. So a patched run resumes the `into` run: from its
// residual stream at block l's input (the model's resume()), from the first patched position t0 on, reading
// the earlier positions' keys and values from the `into` run (the cache of incremental decoding).
// Patches are sorted by t0 and batched, each batch at its smallest t0. The logit difference needs
// only the last position's logits; the loss adds the `into` run's terms before t0.
#pragma once
#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/core/hooks.hpp"
#include "xgrad/inspect/patching_metric.hpp"
#include "xgrad/ops/hook_point.hpp"

namespace xgrad::patching::detail {

// One patch: an index per axis of the hooked value without its batch axis (−1: all of the axis).
template <std::size_t N>
using Patch = std::array<long, N - 1>;

inline std::string block_point(std::size_t l, const char* name) { return "blocks." + std::to_string(l) + "." + name; }

// The `into` run as the patched runs resume it.
template <Real T>
struct ResumePoint {
    const Ids* ids = nullptr;                        // (B, T)
    std::vector<xt::xtensor<T, 3>> residual;         // (B, T, C) at each block's input; [n_layer]: ln_f's input
    std::vector<nn::KeyValueSource<T>> caches;       // each block's keys and values (B, T, cache_width), every position
    xt::xtensor<double, 2> losses;                   // (B, T) the loss metric's terms (0 where not counted)
    double metric = 0;

    // the summed loss terms before position t0, and their count
    std::pair<double, std::size_t> before(std::size_t t0, const Metric& m) const {
        std::pair<double, std::size_t> s{0.0, 0};
        if (m.kind == Metric::Kind::loss)
            for (std::size_t b = 0; b < losses.shape()[0]; ++b)
                for (std::size_t t = 0; t < t0; ++t)
                    if (m.targets(b, t) >= 0) s.first += losses(b, t), ++s.second;
        return s;
    }
};

template <PatchableDecoder M, Real T = typename M::value_type>
ResumePoint<T> resume_point(const M& model, const Ids& into, const Metric& m) {
    const std::size_t B = into.shape()[0], L = into.shape()[1], W = model.decoding().cache_width;
    const std::size_t layers = model.decoding().layers;
    ResumePoint<T> run;
    run.ids = &into;
    run.caches.resize(layers);
    for (auto& c : run.caches)
        c.keys = constant(xt::xtensor<T, 3>::from_shape({B, L, W})), c.values = constant(xt::xtensor<T, 3>::from_shape({B, L, W}));
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep, "blocks.*.hook_resid_pre");
    cache.attach(keep, block_point(layers - 1, "hook_resid_post"));
    const NoGrad no_grad;
    xt::xtensor<T, 3> logits;
    {
        const UseHooks use(keep);
        logits = metric_logits(model, model.hidden(into, {}, nullptr, 0, &run.caches), m).value();
    }
    for (std::size_t l = 0; l < layers; ++l) run.residual.push_back(cache.value<T, 3>(block_point(l, "hook_resid_pre")));
    run.residual.push_back(cache.value<T, 3>(block_point(layers - 1, "hook_resid_post")));
    run.losses = xt::zeros<double>({B, L});
    if (m.kind == Metric::Kind::loss)
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t t = 0; t < L; ++t)
                if (m.targets(b, t) >= 0) run.losses(b, t) = cross_entropy_at(&logits(b, t, 0), logits.shape()[2], m.targets(b, t));
    run.metric = group_metrics(logits, m, B)[0];
    return run;
}

// Where a patched run can resume for `point`: its block (n_layer for ln_final's point; npos for the
// embeddings: the whole forward), and whether its axis 1 is the position (not for the (B, H, T, T)
// scores and pattern).
struct ResumeAt {
    std::size_t layer = std::numeric_limits<std::size_t>::max();
    bool positions = true;
};
inline ResumeAt resume_at(const std::string& point, std::size_t layers) {
    ResumeAt at;
    const auto ends_with = [&](const std::string& s) {
        return point.size() >= s.size() && point.compare(point.size() - s.size(), s.size(), s) == 0;
    };
    at.positions = !ends_with("hook_attn_scores") && !ends_with("hook_pattern");
    if (point.rfind("ln_final.", 0) == 0) at.layer = layers;
    if (point.rfind("blocks.", 0) == 0) at.layer = std::stoul(point.substr(7));
    return at;
}

// The metric of the `into` run with each patch of `point` taken from `from_value` (B, ...), the
// patched runs batched up to max_rows rows a forward, running at most a quarter more positions than
// the patches need (see the top of this file).
template <std::size_t N, PatchableDecoder M, Real T = typename M::value_type>
std::vector<double> sweep(const M& model, const ResumePoint<T>& run, const Metric& m, const std::string& point,
                          const xt::xtensor<T, N>& from_value, const std::vector<Patch<N>>& patches, std::size_t max_rows) {
    const Ids& into = *run.ids;
    const nn::DecodingShape shape = model.decoding();
    const std::size_t B = into.shape()[0], L = into.shape()[1], C = shape.width, W = shape.cache_width, layers = shape.layers;
    const ResumeAt at = resume_at(point, layers);
    const bool resumes = at.layer <= layers;
    const std::size_t group = std::max<std::size_t>(1, max_rows / B);
    const auto start = [&](std::size_t k) {  // the first position patch k touches
        return resumes && at.positions ? std::size_t(std::max(patches[k][0], 0L)) : std::size_t(0);
    };
    std::vector<std::size_t> order(patches.size());
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start(a) < start(b); });
    std::vector<double> out(patches.size());
    const NoGrad no_grad;
    for (std::size_t first = 0; first < order.size();) {
        const std::size_t t0 = start(order[first]);
        std::size_t end = first + 1, needed = L - t0;  // positions the batch's patches need
        while (end < order.size() && end - first < group && 4 * (end + 1 - first) * (L - t0) <= 5 * (needed + L - start(order[end])))
            needed += L - start(order[end++]);
        const std::size_t G = end - first, P = L - t0;
        const std::size_t from_row = from_value.size() / B, inner = from_row / from_value.shape()[1];
        Hooks hooks;  // the patch: rows g·B .. (g+1)·B take patch order[first + g] from `from_value`
        hooks.forward(point, [&](const Var<T, N>& value) {
            xt::xtensor<T, N> source = xt::xtensor<T, N>::from_shape(value.shape());
            xt::xtensor<bool, N> mask = xt::zeros<bool>(value.shape());
            // the value's positions: [t0, L), or [0, L) for keys and values that include the cached ones
            const std::size_t offset = at.positions ? L - value.shape(1) : 0, row = value.value().size() / (G * B);
            for (std::size_t g = 0; g < G; ++g) {
                for (std::size_t b = 0; b < B; ++b)
                    std::copy_n(from_value.data() + b * from_row + offset * inner, row, source.data() + (g * B + b) * row);
                xt::xstrided_slice_vector slices{xt::range(g * B, (g + 1) * B)};
                const auto& patch = patches[order[first + g]];
                for (std::size_t a = 0; a < patch.size(); ++a) {
                    const long i = a == 0 && patch[a] >= 0 ? patch[a] - long(offset) : patch[a];
                    i < 0 ? slices.push_back(xt::all()) : slices.push_back(std::size_t(i));
                }
                xt::strided_view(mask, slices) = true;
            }
            return Var<T, N>(where(mask, constant(std::move(source)), value));
        });
        const UseHooks use(hooks);
        Var<T, 3> hidden;
        if (!resumes) {  // the `into` rows once per patch, from the embeddings
            Ids ids({G * B, L});
            for (std::size_t g = 0; g < G; ++g) std::copy(into.begin(), into.end(), ids.begin() + long(g * B * L));
            hidden = model.hidden(ids, {}, nullptr);
        } else {
            const auto& residual = run.residual[at.layer];
            xt::xtensor<T, 3> x = xt::xtensor<T, 3>::from_shape({G * B, P, C});
            for (std::size_t r = 0; r < G * B; ++r) std::copy_n(&residual(r % B, t0, 0), P * C, &x(r, 0, 0));
            std::vector<nn::KeyValueSource<T>> caches;
            if (t0 > 0) {  // positions before t0: the `into` run's keys and values
                caches.resize(layers);
                for (std::size_t l = at.layer; l < layers; ++l) {
                    xt::xtensor<T, 3> keys = xt::xtensor<T, 3>::from_shape({G * B, L, W}), values = keys;
                    for (std::size_t r = 0; r < G * B; ++r) {
                        std::copy_n(&run.caches[l].keys.value()(r % B, 0, 0), t0 * W, &keys(r, 0, 0));
                        std::copy_n(&run.caches[l].values.value()(r % B, 0, 0), t0 * W, &values(r, 0, 0));
                    }
                    caches[l] = {constant(std::move(keys)), constant(std::move(values)), t0};
                }
            }
            hidden = model.resume(at.layer, constant(std::move(x)), {}, nullptr, t0, t0 > 0 ? &caches : nullptr);
        }
        const std::size_t first_position = L - hidden.shape(1);
        const auto values = group_metrics(metric_logits(model, hidden, m).value(), m, B, first_position,
                                          run.before(first_position, m));
        for (std::size_t g = 0; g < G; ++g) out[order[first + g]] = values[g];
        first = end;
    }
    return out;
}

}  // namespace xgrad::patching::detail
