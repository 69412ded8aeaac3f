// Patching a head's queries and keys (attn.hook_q, attn.hook_k) on nn::GPT, three ways:
//
//   exact     the metric of the `into` run with the head's q (or k) taken from the `from` run, minus
//             the `into` run's metric (batched, as activation_patching);
//   atp       AtP's linear estimate, (a_from − a_into) · ∂metric/∂a at the `into` run;
//   atp_star  AtP*'s correction (Kramár et al. 2024, arXiv 2403.00745): a query or key changes the
//             scores, and a softmax that saturates makes their linearization useless; instead the
//             pattern is recomputed with the patched scores, and the estimate is
//             ∂metric/∂pattern · (pattern' − pattern) at the `into` run, summed over every row.
//
// Each (L, H) for the head at every position and (L, H, T) at one position (a query's row, or a
// key's column, of the pattern).
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include <xtensor/xview.hpp>

#include "xgrad/inspect/patching.hpp"

namespace xgrad::patching {

struct QueryKeyEstimates {
    xt::xtensor<double, 2> q_head, k_head;          // (L, H)
    xt::xtensor<double, 3> q_head_pos, k_head_pos;  // (L, H, T)
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

}  // namespace detail

template <Real T>
QueryKeyPatching query_key_patching(const nn::GPT<T>& model, const Ids& from, const Ids& into, const Metric& m,
                                    std::size_t max_rows = 256) {
    detail::check_runs("query_key_patching", from, into, m, model.config.vocab_size);
    const std::size_t Ls = model.config.n_layer, H = model.config.n_head, B = into.shape()[0], Tn = into.shape()[1];
    const std::size_t D = model.config.n_embd / H;
    const double scale = 1 / std::sqrt(double(D));
    ActivationCache from_cache, into_cache;
    Hooks keep_from, keep_into;
    for (const char* point : {"blocks.*.attn.hook_q", "blocks.*.attn.hook_k"}) {
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
    QueryKeyPatching r;
    for (QueryKeyEstimates* e : {&r.exact, &r.atp, &r.atp_star}) {
        e->q_head = e->k_head = xt::zeros<double>({Ls, H});
        e->q_head_pos = e->k_head_pos = xt::zeros<double>({Ls, H, Tn});
    }
    std::vector<detail::Patch<4>> by_head, by_head_pos;  // hook_q (B, T, H, D) without B
    for (std::size_t h = 0; h < H; ++h) {
        by_head.push_back({-1, long(h), -1});
        for (std::size_t t = 0; t < Tn; ++t) by_head_pos.push_back({long(t), long(h), -1});
    }
    std::vector<double> row;
    const detail::ResumePoint<T> run = detail::resume_point(model, into, m);
    for (std::size_t l = 0; l < Ls; ++l) {
        for (const char* which : {"q", "k"}) {
            const bool query = which[0] == 'q';
            const std::string point = detail::block_point(l, query ? "attn.hook_q" : "attn.hook_k");
            auto& exact_head = query ? r.exact.q_head : r.exact.k_head;
            auto& exact_pos = query ? r.exact.q_head_pos : r.exact.k_head_pos;
            const auto& a_from = from_cache.value<T, 4>(point);
            const auto heads = detail::sweep<4>(model, run, m, point, a_from, by_head, max_rows);
            const auto positions = detail::sweep<4>(model, run, m, point, a_from, by_head_pos, max_rows);
            const auto atp_heads = detail::attribute<4>(a_from, into_cache.value<T, 4>(point), into_cache.grad<T, 4>(point), by_head);
            const auto atp_positions =
                detail::attribute<4>(a_from, into_cache.value<T, 4>(point), into_cache.grad<T, 4>(point), by_head_pos);
            for (std::size_t h = 0; h < H; ++h) {
                exact_head(l, h) = heads[h] - into_metric;
                (query ? r.atp.q_head : r.atp.k_head)(l, h) = atp_heads[h];
                for (std::size_t t = 0; t < Tn; ++t) {
                    exact_pos(l, h, t) = positions[h * Tn + t] - into_metric;
                    (query ? r.atp.q_head_pos : r.atp.k_head_pos)(l, h, t) = atp_positions[h * Tn + t];
                }
            }
        }
        // AtP*: the pattern of head h recomputed with the patched queries or keys
        const auto& q_into = into_cache.value<T, 4>(detail::block_point(l, "attn.hook_q"));  // (B, T, H, D)
        const auto& k_into = into_cache.value<T, 4>(detail::block_point(l, "attn.hook_k"));
        const auto& q_from = from_cache.value<T, 4>(detail::block_point(l, "attn.hook_q"));
        const auto& k_from = from_cache.value<T, 4>(detail::block_point(l, "attn.hook_k"));
        const auto& pattern = into_cache.value<T, 4>(detail::block_point(l, "attn.hook_pattern"));  // (B, H, T, T)
        const auto& dpattern = into_cache.grad<T, 4>(detail::block_point(l, "attn.hook_pattern"));
        for (std::size_t b = 0; b < B; ++b)
            for (std::size_t h = 0; h < H; ++h) {
                const auto keys_into = xt::view(k_into, b, xt::all(), h, xt::all());  // (T, D)
                const auto keys_from = xt::view(k_from, b, xt::all(), h, xt::all());
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
                    r.atp_star.k_head(l, h) += row_effect(t);
                }
                for (std::size_t s = 0; s < Tn; ++s)  // the key at s alone: column s of every row t >= s
                    for (std::size_t t = s; t < Tn; ++t) {
                        xt::xtensor<T, 2> keys = keys_into;
                        xt::view(keys, s, xt::all()) = xt::view(keys_from, s, xt::all());
                        detail::causal_pattern_row(xt::view(q_into, b, t, h, xt::all()), keys, t, D, scale, row);
                        r.atp_star.k_head_pos(l, h, s) += row_effect(t);
                    }
            }
    }
    return r;
}

}  // namespace xgrad::patching
