// The metrics of activation and attribution patching (inspect/patching.hpp): the mean over the batch
// of the logit difference (correct − wrong token at the last position) or nanoGPT's loss, on the
// tape (metric) and of a batch of patched runs at once (group_metrics), from the logits it reads
// (metric_logits).
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/nn/generate.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::patching {

using Ids = xt::xtensor<std::int64_t, 2>;

struct Metric {
    enum class Kind { logit_diff, loss } kind = Kind::logit_diff;
    std::vector<std::int64_t> correct{}, wrong{};  // logit_diff: a token per batch row, at position T − 1
    Ids targets{};                                 // loss: (B, T), −1 ignored
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

// A decoder the patching functions study (nn::GPT, nn::Llama, or a user's): nn::generate's
// CachedDecoder (nn/generate.hpp) with TransformerLens's hook points (hook_embed, and per block
// hook_resid_pre, attn.hook_z, hook_attn_out, hook_mlp_out, hook_resid_post), resume(layer, x)
// from a block's input, and final_norm() (the norm before the unembedding).
template <class M>
concept PatchableDecoder = nn::CachedDecoder<M> && requires(const M& m, const Var<typename M::value_type, 3>& x) {
    { m.resume(std::size_t(0), x) } -> std::same_as<Var<typename M::value_type, 3>>;
    { m.final_norm()(x) } -> std::convertible_to<Var<typename M::value_type, 3>>;
};

// The logits the metric reads, from the final hidden states (B, T, C) (hidden()): the last
// position's (B, 1, V) for the logit difference, as nanoGPT's model.py without targets; every
// position's for the loss.
template <PatchableDecoder M, Real T = typename M::value_type>
Var<T, 3> metric_logits(const M& model, const Var<T, 3>& hidden, const Metric& m) {
    const long L = long(hidden.shape(1));
    return linear(m.kind == Metric::Kind::logit_diff ? slice(hidden, 1, L - 1, L) : hidden, model.unembedding());
}
// The same from ids (B, T).
template <PatchableDecoder M, Real T = typename M::value_type>
Var<T, 3> metric_logits(const M& model, const Ids& ids, const Metric& m) {
    return metric_logits(model, model.hidden(ids, {}, nullptr), m);
}

namespace detail {
// nanoGPT's cross-entropy of one position's logits z (V) against target y.
template <Real T>
double cross_entropy_at(const T* z, std::size_t V, std::int64_t y) {
    double top = double(z[0]), sum = 0;
    for (std::size_t v = 1; v < V; ++v) top = std::max(top, double(z[v]));
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(double(z[v]) - top);
    return top + std::log(sum) - double(z[y]);
}
}  // namespace detail

// The metric of each group of B rows of logits (G·B, T', V): the patched runs of one forward. The
// logits hold positions [first, first + T') of each row; for the loss, `before` holds the summed
// cross-entropies and their count at the positions before `first` (the same in every group). The
// logit difference reads the logits' last position.
template <Real T>
std::vector<double> group_metrics(const xt::xtensor<T, 3>& logits, const Metric& m, std::size_t B, std::size_t first = 0,
                                  std::pair<double, std::size_t> before = {0.0, 0}) {
    const std::size_t G = logits.shape()[0] / B, L = logits.shape()[1], V = logits.shape()[2];
    std::vector<double> out(G, 0.0);
    for (std::size_t g = 0; g < G; ++g) {
        double total = m.kind == Metric::Kind::loss ? before.first : 0.0;
        std::size_t count = m.kind == Metric::Kind::loss ? before.second : 0;
        for (std::size_t b = 0; b < B; ++b) {
            const T* row = &logits(g * B + b, 0, 0);
            if (m.kind == Metric::Kind::logit_diff) {
                const T* last = row + (L - 1) * V;
                total += double(last[m.correct[b]]) - double(last[m.wrong[b]]), ++count;
                continue;
            }
            for (std::size_t t = 0; t < L; ++t) {  // cross-entropy of each kept target
                const std::int64_t y = m.targets(b, first + t);
                if (y >= 0) total += detail::cross_entropy_at(row + t * V, V, y), ++count;
            }
        }
        out[g] = count ? total / double(count) : 0.0;
    }
    return out;
}

}  // namespace xgrad::patching
