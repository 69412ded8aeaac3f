// Activation patching and attribution patching on a decoder (nn::GPT, nn::Llama: PatchableDecoder,
// patching_metric.hpp), through its hook points (docs/hooks.md):
//
//   activation_patching(model, from, into, metric): the metric of the run on `into` with one
//     activation taken from the run on `from`, for every patch: each head's z (all positions, and
//     each position), and resid_pre, attn_out and mlp_out at each layer and position. Denoising is
//     from the clean ids into the corrupted ones; noising the other way. The patched runs are
//     batched, up to max_rows rows a forward, and each resumes the `into` run where the patch
//     begins to matter (inspect/patch_sweep.hpp).
//   attribution_patching(model, from, into, metric): AtP's estimate of each of those patches' effect
//     (patched metric − the `into` run's metric) from one forward on `from` and one forward and
//     backward on `into`: (a_from − a_into) · dmetric/da at the `into` run, summed over the patched
//     elements (every batch row).
//   Both take a PatchSets saying which of those patches to make (default: all).
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
#include "xgrad/inspect/patch_sweep.hpp"
#include "xgrad/inspect/patching_metric.hpp"
#include "xgrad/nn/gpt.hpp"

namespace xgrad::patching {

// What a patching method gives: the two runs' metrics and one value per patch.
struct Result {
    double from = 0, into = 0;            // the metric of the unpatched runs
    xt::xtensor<double, 2> head;          // (L, H): attn.hook_z of the head, every position
    xt::xtensor<double, 3> head_pos;      // (L, H, T): the same at one position
    xt::xtensor<double, 2> resid_pre;     // (L, T): blocks.{l}.hook_resid_pre at one position
    xt::xtensor<double, 2> attn_out;      // (L, T)
    xt::xtensor<double, 2> mlp_out;       // (L, T)
};

// Which of Result's patches a method makes; those left out stay empty (shape 0).
struct PatchSets {
    bool head = true, head_pos = true, resid_pre = true, attn_out = true, mlp_out = true;
};

namespace detail {
// The points the sets patch, kept by `cache` (with their gradients, asked).
inline void keep_patched_points(ActivationCache& cache, Hooks& hooks, bool gradients, const PatchSets& sets) {
    if (sets.head || sets.head_pos) cache.attach(hooks, "blocks.*.attn.hook_z", gradients);
    if (sets.resid_pre) cache.attach(hooks, "blocks.*.hook_resid_pre", gradients);
    if (sets.attn_out) cache.attach(hooks, "blocks.*.hook_attn_out", gradients);
    if (sets.mlp_out) cache.attach(hooks, "blocks.*.hook_mlp_out", gradients);
}

// While alive, the model's parameters take no gradient, as torch's requires_grad_(False): with
// the embeddings made a leaf that takes one (a forward hook on hook_embed returning
// parameter(copy)), a backward computes the activations' gradients only, no dW (AtP needs nothing
// else).
template <class M>
class FrozenParameters {
public:
    explicit FrozenParameters(const M& model) {
        for_each_parameter(model, [&](const std::string&, const auto& p) {
            nodes_.push_back({&p.node()->requires_grad, p.node()->requires_grad});
            p.node()->requires_grad = false;
        });
    }
    ~FrozenParameters() {
        for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) *it->first = it->second;
    }
    FrozenParameters(const FrozenParameters&) = delete;
    FrozenParameters& operator=(const FrozenParameters&) = delete;

private:
    std::vector<std::pair<bool*, bool>> nodes_;
};

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
// position, each as `sets` asks; destination receives one value per patch, in order.
template <class F>
void for_each_patch_set(std::size_t layers, std::size_t heads, std::size_t positions, const PatchSets& sets, Result& r, F f) {
    const auto sized = [](bool wanted, auto shape) { return wanted ? shape : decltype(shape){}; };
    using Shape2 = std::array<std::size_t, 2>;
    r.head = xt::zeros<double>(sized(sets.head, Shape2{layers, heads}));
    r.head_pos = xt::zeros<double>(sized(sets.head_pos, std::array<std::size_t, 3>{layers, heads, positions}));
    r.resid_pre = xt::zeros<double>(sized(sets.resid_pre, Shape2{layers, positions}));
    r.attn_out = xt::zeros<double>(sized(sets.attn_out, Shape2{layers, positions}));
    r.mlp_out = xt::zeros<double>(sized(sets.mlp_out, Shape2{layers, positions}));
    std::vector<Patch<4>> by_head, by_head_pos;  // z (B, T, H, D) without B: (T, H, D); head_pos (L, H, T)
    for (std::size_t h = 0; h < heads; ++h) {
        by_head.push_back({-1, long(h), -1});
        for (std::size_t t = 0; t < positions; ++t) by_head_pos.push_back({long(t), long(h), -1});
    }
    std::vector<Patch<3>> by_position;
    for (std::size_t t = 0; t < positions; ++t) by_position.push_back({long(t), -1});
    for (std::size_t l = 0; l < layers; ++l) {
        const std::string z = block_point(l, "attn.hook_z");
        if (sets.head) f(z, by_head, &r.head(l, 0));
        if (sets.head_pos) f(z, by_head_pos, &r.head_pos(l, 0, 0));
        if (sets.resid_pre) f(block_point(l, "hook_resid_pre"), by_position, &r.resid_pre(l, 0));
        if (sets.attn_out) f(block_point(l, "hook_attn_out"), by_position, &r.attn_out(l, 0));
        if (sets.mlp_out) f(block_point(l, "hook_mlp_out"), by_position, &r.mlp_out(l, 0));
    }
}

}  // namespace detail

template <PatchableDecoder M, Real T = typename M::value_type>
Result activation_patching(const M& model, const Ids& from, const Ids& into, const Metric& m,
                           std::size_t max_rows = 256, const PatchSets& sets = {}) {
    const nn::DecodingShape shape = model.decoding();
    detail::check_runs("activation_patching", from, into, m, shape.vocab_size);
    ActivationCache cache;
    Hooks keep;
    detail::keep_patched_points(cache, keep, false, sets);
    Result r;
    {
        const NoGrad no_grad;
        const UseHooks use(keep);
        r.from = group_metrics(metric_logits(model, from, m).value(), m, from.shape()[0])[0];
    }
    const detail::ResumePoint<T> run = detail::resume_point(model, into, m);
    r.into = run.metric;
    detail::for_each_patch_set(shape.layers, shape.heads, into.shape()[1], sets, r,
                               [&](const std::string& point, const auto& patches, double* out) {
                                   constexpr std::size_t N = std::tuple_size_v<typename std::decay_t<decltype(patches)>::value_type> + 1;
                                   const auto values = detail::sweep<N>(model, run, m, point, cache.value<T, N>(point),
                                                                        patches, max_rows);
                                   std::copy(values.begin(), values.end(), out);
                               });
    return r;
}

template <PatchableDecoder M, Real T = typename M::value_type>
Result attribution_patching(const M& model, const Ids& from, const Ids& into, const Metric& m,
                            const PatchSets& sets = {}) {
    const nn::DecodingShape shape = model.decoding();
    detail::check_runs("attribution_patching", from, into, m, shape.vocab_size);
    ActivationCache from_cache, into_cache;
    Hooks keep_from, keep_into;
    detail::keep_patched_points(from_cache, keep_from, false, sets);
    detail::keep_patched_points(into_cache, keep_into, true, sets);
    Result r;
    {
        const NoGrad no_grad;
        const UseHooks use(keep_from);
        r.from = group_metrics(metric_logits(model, from, m).value(), m, from.shape()[0])[0];
    }
    Var<T, 0> value;
    {
        const detail::FrozenParameters frozen(model);
        keep_into.forward("hook_embed", [](const Var<T, 3>& tokens) { return parameter(xt::xtensor<T, 3>(tokens.value())); });
        {
            const UseHooks use(keep_into);
            value = metric(metric_logits(model, into, m), m);
        }
        backward(value, {.keep_intermediate_grads = false});
    }
    r.into = double(value.value()());
    detail::for_each_patch_set(shape.layers, shape.heads, into.shape()[1], sets, r,
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
