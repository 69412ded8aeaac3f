// Patching a head's queries and keys on a decoder (nn::GPT, nn::Llama), three ways:
//
//   exact     the metric of the `into` run with the head's q (or k) taken from the `from` run, minus
//             the `into` run's metric (batched, as activation_patching);
//   atp       AtP's linear estimate, (a_from − a_into) · ∂metric/∂a at the `into` run;
//   atp_star  AtP*'s correction (Kramár et al. 2024, arXiv 2403.00745): a query or key changes the
//             scores, and a softmax that saturates makes their linearization useless; instead the
//             pattern is recomputed with the patched scores, and the estimate is
//             ∂metric/∂pattern · (pattern' − pattern) at the `into` run, summed over every row.
//
// The queries and keys are those the scores are formed from: GPT's attn.hook_q and hook_k, Llama's
// rotated attn.hook_rot_q and hook_rot_k (the rotary embedding is a fixed map per position, so
// patching the rotated q of a head is patching its q). Queries: (L, H) for the head at every
// position and (L, H, T) at one position (a row of the pattern). Keys: per key/value head, (L, H_kv)
// and (L, H_kv, T) (a column of the pattern); under grouped-query attention a key head is read by
// H / H_kv query heads, and its estimates sum the effects on all of their patterns.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "xgrad/inspect/patching.hpp"
#include "xgrad/nn/llama.hpp"

namespace xgrad::patching {

struct QueryKeyEstimates {
    xt::xtensor<double, 2> q_head, k_head;          // (L, H), (L, H_kv)
    xt::xtensor<double, 3> q_head_pos, k_head_pos;  // (L, H, T), (L, H_kv, T)
};
struct QueryKeyPatching {
    QueryKeyEstimates exact, atp, atp_star;
};

namespace detail {

// The causal softmax of row t of scale · q_t · kᵀ over keys 0..t, q and k rows of D values.
template <class Q, class K>
void causal_pattern_row(const Q& q, const K& k, std::size_t t, std::size_t D, double scale, std::vector<double>& row) {
    row.assign(t + 1, 0.0);
    double top = -std::numeric_limits<double>::infinity(), sum = 0;
    for (std::size_t j = 0; j <= t; ++j) {
        double s = 0;
        for (std::size_t d = 0; d < D; ++d) s += double(q(d)) * double(k(j, d));
        row[j] = scale * s, top = std::max(top, row[j]);
    }
    for (double& e : row) sum += (e = std::exp(e - top));
    for (double& e : row) e /= sum;
}

// The hook points the scores are formed from, under attn.: {queries, keys}.
template <Real T>
std::array<const char*, 2> score_operands(const nn::GPT<T>&) { return {"attn.hook_q", "attn.hook_k"}; }
template <Real T>
std::array<const char*, 2> score_operands(const nn::Llama<T>&) { return {"attn.hook_rot_q", "attn.hook_rot_k"}; }

}  // namespace detail

// A decoder whose score operands query_key_patching knows (nn::GPT, nn::Llama).
template <class M>
concept QueryKeyDecoder = PatchableDecoder<M> && requires(const M& m) { detail::score_operands(m); };

template <QueryKeyDecoder M, Real T = typename M::value_type>
QueryKeyPatching query_key_patching(const M& model, const Ids& from, const Ids& into, const Metric& m,
                                    std::size_t max_rows = 256) {
    detail::check_runs("query_key_patching", from, into, m, model.decoding().vocab_size);
    const std::size_t Ls = model.decoding().layers, H = model.decoding().heads, B = into.shape()[0], Tn = into.shape()[1];
    const std::array<const char*, 2> operands = detail::score_operands(model);
    const char *q_name = operands[0], *k_name = operands[1];
    ActivationCache from_cache, into_cache;
    Hooks keep_from, keep_into;
    for (const char* name : {q_name, k_name}) {
        const std::string point = std::string("blocks.*.") + name;
        from_cache.attach(keep_from, point);
        into_cache.attach(keep_into, point, true);
    }
    into_cache.attach(keep_into, "blocks.*.attn.hook_pattern", true);  // the reference path: the pattern formed
    {
        const NoGrad no_grad;
        const UseHooks use(keep_from);
        model(from);
    }
    Var<T, 0> value;
    {
        const UseHooks use(keep_into);
        value = metric(model(into), m);
    }
    backward(value);
    const double into_metric = double(value.value()());
    const auto& k0 = from_cache.value<T, 4>(detail::block_point(0, k_name));  // (B, T, H_kv, D)
    const std::size_t Hkv = k0.shape()[2], D = k0.shape()[3], group = H / Hkv;
    const double scale = 1 / std::sqrt(double(D));
    QueryKeyPatching r;
    for (QueryKeyEstimates* e : {&r.exact, &r.atp, &r.atp_star}) {
        e->q_head = xt::zeros<double>({Ls, H}), e->k_head = xt::zeros<double>({Ls, Hkv});
        e->q_head_pos = xt::zeros<double>({Ls, H, Tn}), e->k_head_pos = xt::zeros<double>({Ls, Hkv, Tn});
    }
    std::vector<double> row;
    const detail::ResumePoint<T> run = detail::resume_point(model, into, m);
    for (std::size_t l = 0; l < Ls; ++l) {
        for (const bool query : {true, false}) {
            const std::string point = detail::block_point(l, query ? q_name : k_name);
            const std::size_t n = query ? H : Hkv;
            std::vector<detail::Patch<4>> by_head, by_head_pos;  // (B, T, n, D) without B
            for (std::size_t h = 0; h < n; ++h) {
                by_head.push_back({-1, long(h), -1});
                for (std::size_t t = 0; t < Tn; ++t) by_head_pos.push_back({long(t), long(h), -1});
            }
            auto& exact_head = query ? r.exact.q_head : r.exact.k_head;
            auto& exact_pos = query ? r.exact.q_head_pos : r.exact.k_head_pos;
            const auto& a_from = from_cache.value<T, 4>(point);
            const auto& a_into = into_cache.value<T, 4>(point);
            const auto& grad = into_cache.grad<T, 4>(point);
            const auto heads = detail::sweep<4>(model, run, m, point, a_from, by_head, max_rows);
            const auto positions = detail::sweep<4>(model, run, m, point, a_from, by_head_pos, max_rows);
            const auto atp_heads = detail::attribute<4>(a_from, a_into, grad, by_head);
            const auto atp_positions = detail::attribute<4>(a_from, a_into, grad, by_head_pos);
            for (std::size_t h = 0; h < n; ++h) {
                exact_head(l, h) = heads[h] - into_metric;
                (query ? r.atp.q_head : r.atp.k_head)(l, h) = atp_heads[h];
                for (std::size_t t = 0; t < Tn; ++t) {
                    exact_pos(l, h, t) = positions[h * Tn + t] - into_metric;
                    (query ? r.atp.q_head_pos : r.atp.k_head_pos)(l, h, t) = atp_positions[h * Tn + t];
                }
            }
        }
        // AtP*: the pattern of query head h recomputed with the patched queries or keys (its keys:
        // key head g = h / group)
        const auto& q_into = into_cache.value<T, 4>(detail::block_point(l, q_name));  // (B, T, H, D)
        const auto& k_into = into_cache.value<T, 4>(detail::block_point(l, k_name));  // (B, T, H_kv, D)
        const auto& q_from = from_cache.value<T, 4>(detail::block_point(l, q_name));
        const auto& k_from = from_cache.value<T, 4>(detail::block_point(l, k_name));
        const auto& pattern = into_cache.value<T, 4>(detail::block_point(l, "attn.hook_pattern"));  // (B, H, T, T)
        const auto& dpattern = into_cache.grad<T, 4>(detail::block_point(l, "attn.hook_pattern"));
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t h = 0; h < H; ++h) {
                const std::size_t g = h / group;
                const auto keys_into = xt::view(k_into, b, xt::all(), g, xt::all());  // (T, D)
                const auto keys_from = xt::view(k_from, b, xt::all(), g, xt::all());
                // effect of row t changing to `row`: Σ_j dP · (P' − P)
                const auto row_effect = [&](std::size_t t) {
                    double e = 0;
                    for (std::size_t j = 0; j <= t; ++j) e += double(dpattern(b, h, t, j)) * (row[j] - double(pattern(b, h, t, j)));
                    return e;
                };
                for (std::size_t t = 0; t < Tn; ++t) {
                    // a query at t: its row of scores
                    detail::causal_pattern_row(xt::view(q_from, b, t, h, xt::all()), keys_into, t, D, scale, row);
                    const double q_effect = row_effect(t);
                    r.atp_star.q_head_pos(l, h, t) += q_effect, r.atp_star.q_head(l, h) += q_effect;
                    // every key from the `from` run: the whole row
                    detail::causal_pattern_row(xt::view(q_into, b, t, h, xt::all()), keys_from, t, D, scale, row);
                    r.atp_star.k_head(l, g) += row_effect(t);
                }
                for (std::size_t s = 0; s < Tn; ++s)  // the key at s alone: column s of every row t >= s
                    for (std::size_t t = s; t < Tn; ++t) {
                        xt::xtensor<T, 2> keys = keys_into;
                        xt::view(keys, s, xt::all()) = xt::view(keys_from, s, xt::all());
                        detail::causal_pattern_row(xt::view(q_into, b, t, h, xt::all()), keys, t, D, scale, row);
                        r.atp_star.k_head_pos(l, g, s) += row_effect(t);
                    }
            }
    }
    return r;
}

}  // namespace xgrad::patching
