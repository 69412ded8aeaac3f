// Reading a decoder's metric off its residual stream (inspect/patching.hpp's metrics):
//
//   logit_lens(model, ids, metric): the metric read from each block's resid_pre and from the final
//     residual, each through the final norm (GPT's ln_f, Llama's norm; with its own statistics) and
//     the unembedding: (L + 1). Any PatchableDecoder.
//   direct_logit_attribution(model, ids, metric): (nn::GPT, nn::Llama) the logit difference split
//     into the terms the final residual at position T − 1 sums: the blocks' input (embeddings), each
//     head (its z times its slice of the out projection, GPT's c_proj or Llama's wo), each
//     attention's out-projection bias, each MLP (hook_mlp_out), and the final norm's bias; each
//     residual term centred (LayerNorm; not RMSNorm), divided by the norm's scale of the final
//     residual (σ or the RMS, frozen from the run), times its weight, dotted with the unembedding's
//     correct − wrong row. The terms sum to the metric (exactly, up to rounding).
//   integrated_gradients(model, ids, baseline, metric, steps): attributions to the blocks' input x
//     (token plus position embedding) along the straight path from the baseline's x0 (another run's
//     embeddings, or zeros) to x: (x − x0) · mean_k ∂metric/∂x at x0 + α_k (x − x0),
//     α_k = (k − ½)/steps, summed over the embedding; completeness |Σ attributions − (M(x) − M(x0))|.
//     Any PatchableDecoder.
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>

#include <xtensor/xview.hpp>

#include "xgrad/inspect/patching.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::patching {

template <PatchableDecoder M, Real T = typename M::value_type>
xt::xtensor<double, 1> logit_lens(const M& model, const Ids& ids, const Metric& m) {
    detail::check_metric("logit_lens", m, ids.shape(), model.decoding().vocab_size);
    const std::size_t L = model.decoding().layers;
    ActivationCache cache;
    Hooks keep;
    cache.attach(keep, "blocks.*.hook_resid_pre");
    cache.attach(keep, detail::block_point(L - 1, "hook_resid_post"));
    const NoGrad no_grad;
    {
        const UseHooks use(keep);
        model(ids);
    }
    xt::xtensor<double, 1> out = xt::zeros<double>({L + 1});
    for (std::size_t l = 0; l <= L; ++l) {
        const std::string point = l < L ? detail::block_point(l, "hook_resid_pre") : detail::block_point(L - 1, "hook_resid_post");
        const Var<T, 3> logits = linear(model.final_norm()(constant(cache.value<T, 3>(point))), model.unembedding());
        out(l) = group_metrics(logits.value(), m, ids.shape()[0])[0];
    }
    return out;
}

struct DirectLogitAttribution {
    double embed = 0;            // the blocks' input (token and position embeddings)
    xt::xtensor<double, 2> head;  // (L, H)
    xt::xtensor<double, 1> attn_bias, mlp;  // (L): the out projection's bias of each attention (0 without); each MLP
    double ln_bias = 0;          // the final norm's bias · (u_correct − u_wrong) (0 without)
    double total = 0;            // the metric: the sum of every term above
};

namespace detail {
// What direct logit attribution reads besides the hook points: layer l's out projection (weight
// (C, H·D), bias or none) and the final norm.
template <Real T>
const nn::Linear<T>& out_projection(const nn::GPT<T>& m, std::size_t l) { return m.transformer.h[l].attn.c_proj; }
template <Real T>
const nn::Linear<T>& out_projection(const nn::Llama<T>& m, std::size_t l) { return m.layers[l].attention.wo; }

template <Real T>
struct NormReads {
    bool centred = true;  // LayerNorm subtracts the mean; RMSNorm does not
    double eps = 0;
    const Var<T, 1>* weight = nullptr;  // none: 1
    const Var<T, 1>* bias = nullptr;    // none: 0
};
template <Real T>
NormReads<T> norm_reads(const nn::LayerNorm<T>& n) {
    return {true, n.eps, n.weight ? &n.weight : nullptr, n.bias ? &n.bias : nullptr};
}
template <Real T>
NormReads<T> norm_reads(const nn::RMSNorm<T>& n) {
    return {false, n.eps.value_or(std::numeric_limits<T>::epsilon()), n.weight ? &n.weight : nullptr, nullptr};
}
}  // namespace detail

// A decoder whose out projections and final norm direct_logit_attribution reads (nn::GPT, nn::Llama).
template <class M>
concept AttributableDecoder = PatchableDecoder<M> && requires(const M& m) {
    detail::out_projection(m, std::size_t(0));
    detail::norm_reads(m.final_norm());
};

template <AttributableDecoder M, Real T = typename M::value_type>
DirectLogitAttribution direct_logit_attribution(const M& model, const Ids& ids, const Metric& m) {
    if (m.kind != Metric::Kind::logit_diff)
        throw value_error("direct_logit_attribution: the metric must be the logit difference");
    const nn::DecodingShape shape = model.decoding();
    detail::check_metric("direct_logit_attribution", m, ids.shape(), shape.vocab_size);
    const std::size_t B = ids.shape()[0], Tn = ids.shape()[1], L = shape.layers, H = shape.heads;
    const std::size_t C = shape.width, last = Tn - 1;
    ActivationCache cache;
    Hooks keep;
    for (const char* point : {"blocks.*.attn.hook_z", "blocks.*.hook_mlp_out", "blocks.0.hook_resid_pre"})
        cache.attach(keep, point);
    cache.attach(keep, detail::block_point(L - 1, "hook_resid_post"));
    {
        const NoGrad no_grad;
        const UseHooks use(keep);
        model(ids);
    }
    const detail::NormReads<T> norm = detail::norm_reads(model.final_norm());
    const auto& unembed = model.unembedding().value();  // (V, C)
    DirectLogitAttribution r;
    r.head = xt::zeros<double>({L, H}), r.attn_bias = r.mlp = xt::zeros<double>({L});
    const auto& final_resid = cache.value<T, 3>(detail::block_point(L - 1, "hook_resid_post"));
    std::vector<double> v(C), unembed_diff(C), direction(C);
    for (std::size_t b = 0; b < B; ++b) {
        double mean = 0, var = 0;  // var: the mean square about the mean, or about 0 for RMSNorm
        if (norm.centred)
            for (std::size_t c = 0; c < C; ++c) mean += double(final_resid(b, last, c)) / double(C);
        for (std::size_t c = 0; c < C; ++c) var += std::pow(double(final_resid(b, last, c)) - mean, 2);
        const double sigma = std::sqrt(var / double(C) + norm.eps);
        // direction_c = w_c (u_correct − u_wrong)_c / σ: a residual term v adds Σ_c (v_c − mean(v)) · direction_c
        for (std::size_t c = 0; c < C; ++c) {
            unembed_diff[c] = double(unembed(std::size_t(m.correct[b]), c)) - double(unembed(std::size_t(m.wrong[b]), c));
            direction[c] = (norm.weight ? double(norm.weight->value()(c)) : 1.0) * unembed_diff[c] / sigma;
        }
        const auto term = [&](const std::vector<double>& x) {
            double mu = 0, sum = 0;
            if (norm.centred)
                for (double e : x) mu += e / double(C);
            for (std::size_t c = 0; c < C; ++c) sum += (x[c] - mu) * direction[c];
            return sum / double(B);  // the mean over the batch
        };
        const auto& embed = cache.value<T, 3>("blocks.0.hook_resid_pre");
        for (std::size_t c = 0; c < C; ++c) v[c] = double(embed(b, last, c));
        r.embed += term(v);
        for (std::size_t l = 0; l < L; ++l) {
            const auto& z = cache.value<T, 4>(detail::block_point(l, "attn.hook_z"));  // (B, T, H, D)
            const std::size_t D = z.shape()[3];
            const nn::Linear<T>& proj = detail::out_projection(model, l);
            for (std::size_t h = 0; h < H; ++h) {
                for (std::size_t c = 0; c < C; ++c) {  // z_h (D) · W_O[:, hD:(h+1)D]ᵀ (C)
                    double s = 0;
                    for (std::size_t d = 0; d < D; ++d) s += double(proj.weight.value()(c, h * D + d)) * double(z(b, last, h, d));
                    v[c] = s;
                }
                r.head(l, h) += term(v);
            }
            if (proj.bias) {
                for (std::size_t c = 0; c < C; ++c) v[c] = double(proj.bias.value()(c));
                r.attn_bias(l) += term(v);
            }
            const auto& mlp = cache.value<T, 3>(detail::block_point(l, "hook_mlp_out"));
            for (std::size_t c = 0; c < C; ++c) v[c] = double(mlp(b, last, c));
            r.mlp(l) += term(v);
        }
        if (norm.bias)
            for (std::size_t c = 0; c < C; ++c) r.ln_bias += double(norm.bias->value()(c)) * unembed_diff[c] / double(B);
    }
    r.total = r.embed + xt::sum(r.head)() + xt::sum(r.attn_bias)() + xt::sum(r.mlp)() + r.ln_bias;
    return r;
}

struct IntegratedGradients {
    xt::xtensor<double, 2> attribution;  // (B, T)
    double from = 0, baseline = 0;       // the metric at x and at the baseline x0
    double completeness = 0;             // |Σ attribution − (from − baseline)|
};

// baseline: the ids whose embeddings start the path, or none for zeros.
template <PatchableDecoder M, Real T = typename M::value_type>
IntegratedGradients integrated_gradients(const M& model, const Ids& ids, const std::optional<Ids>& baseline,
                                         const Metric& m, std::size_t steps = 32, std::size_t max_rows = 256) {
    detail::check_runs("integrated_gradients", ids, baseline.value_or(ids), m, model.decoding().vocab_size);
    if (steps == 0) throw value_error("integrated_gradients: steps must be positive");
    const std::size_t B = ids.shape()[0], Tn = ids.shape()[1], C = model.decoding().width;
    const std::string input = "blocks.0.hook_resid_pre";  // the blocks' input
    const auto embeddings = [&](const Ids& x, double* metric_out) {
        ActivationCache cache;
        Hooks keep;
        cache.attach(keep, input);
        const NoGrad no_grad;
        const UseHooks use(keep);
        *metric_out = group_metrics(model(x).value(), m, B)[0];
        return cache.value<T, 3>(input);
    };
    IntegratedGradients r;
    const xt::xtensor<T, 3> x = embeddings(ids, &r.from);
    xt::xtensor<T, 3> x0 = xt::zeros<T>(x.shape());
    if (baseline) x0 = embeddings(*baseline, &r.baseline);
    else {  // the metric with zero embeddings
        Hooks zero;
        zero.forward(input, [&](const Var<T, 3>& v) { return constant(xt::xtensor<T, 3>(xt::zeros<T>(v.shape()))); });
        const NoGrad no_grad;
        const UseHooks use(zero);
        r.baseline = group_metrics(model(ids).value(), m, B)[0];
    }
    xt::xtensor<double, 3> gradient_sum = xt::zeros<double>(x.shape());  // Σ_k ∂M/∂x at x_k
    const std::size_t group = std::max<std::size_t>(1, max_rows / B);
    for (std::size_t first = 0; first < steps; first += group) {
        const std::size_t G = std::min(group, steps - first);
        Ids rows({G * B, Tn});
        Metric repeated = m;
        xt::xtensor<T, 3> path = xt::xtensor<T, 3>::from_shape({G * B, Tn, C});
        for (std::size_t g = 0; g < G; ++g) {
            std::copy(ids.begin(), ids.end(), rows.begin() + long(g * B * Tn));
            const double alpha = (double(first + g) + 0.5) / double(steps);
            auto at = xt::view(path, xt::range(g * B, (g + 1) * B));
            at = x0 + T(alpha) * (x - x0);
            if (g > 0) {
                repeated.correct.insert(repeated.correct.end(), m.correct.begin(), m.correct.end());
                repeated.wrong.insert(repeated.wrong.end(), m.wrong.begin(), m.wrong.end());
            }
        }
        if (m.kind == Metric::Kind::loss) {
            repeated.targets = Ids::from_shape({G * B, Tn});
            for (std::size_t g = 0; g < G; ++g)
                std::copy(m.targets.begin(), m.targets.end(), repeated.targets.begin() + long(g * B * Tn));
        }
        const Var<T, 3> point = parameter(std::move(path));
        Hooks replace;
        replace.forward(input, [&](const Var<T, 3>&) { return point; });
        Var<T, 0> value;
        {
            const UseHooks use(replace);
            value = metric(model(rows), repeated);  // the mean of the G steps' metrics
        }
        backward(value);
        const auto& g = point.grad();  // ∂(mean over the G steps)/∂x_k = (1/G) ∂M/∂x_k
        for (std::size_t k = 0; k < G; ++k)
            for (std::size_t i = 0; i < B * Tn * C; ++i)
                gradient_sum.data()[i] += double(G) * double(g.data()[k * B * Tn * C + i]);
    }
    r.attribution = xt::sum((xt::cast<double>(x) - xt::cast<double>(x0)) * gradient_sum, {2}) / double(steps);
    r.completeness = std::abs(xt::sum(r.attribution)() - (r.from - r.baseline));
    return r;
}

}  // namespace xgrad::patching
