// What `xgrad explore`'s sources share (study/explore.hpp): the attention sites of a recorded tape,
// the losses' driver collect(), and the saliency's helpers. A site is an attention, on whichever
// path it ran (nn/attention/paths.hpp); its values are copied for one sequence b of the batch. What
// a node does not keep (the scores and dS; P and dP of the one-op paths) comes from its
// for_each_internal, recomputed as `xgrad inspect` shows it (nn/attention/fused.hpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "study/explore.hpp"
#include "xgrad/nn/attention/paths.hpp"
#include "xgrad/kernels/gemm.hpp"
#include "xgrad/core/hooks.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/ops/hook_point.hpp"
#include "xgrad/ops/linalg.hpp"

namespace xgrad::cli::explore_detail {

template <Real T>
struct SiteNodes {
    std::string name;  // the node's label without its last part ("transformer.h.0")
    const TensorNode<T, 3>* node = nullptr;  // the weights node (two-op path) or the one-op node
    const nn::detail::HeadOperand<T>*q = nullptr, *k = nullptr, *v = nullptr;
    bool two_op = false;  // P and dP are the node's own value and gradient, not recomputed internals
};

template <Real T>
SiteNodes<T> site_of(const TensorNode<T, 3>& node, const nn::detail::HeadOperand<T>& q, const nn::detail::HeadOperand<T>& k,
                     const nn::detail::HeadOperand<T>& v, bool two_op, std::size_t index) {
    const std::size_t dot = node.label.rfind('.');
    return {dot == std::string::npos ? "attention " + std::to_string(index) : node.label.substr(0, dot), &node, &q, &k,
            &v, two_op};
}

// The sites in tape order, on whichever path each attention ran: the two-op path's weights node
// with the context node that reads it, or a fused or memory-efficient node.
template <Real T>
std::vector<SiteNodes<T>> attention_sites(const Tape& tape) {
    using namespace nn::detail;
    std::vector<SiteNodes<T>> sites;
    for (std::size_t i = 0; i < tape.size(); ++i) {
        const Node* n = &tape[i];
        if (const auto* c = dynamic_cast<const AttentionContextNode<T>*>(n)) {
            const auto* w = c->weights ? dynamic_cast<const AttentionWeightsNode<T>*>(c->weights.node()) : nullptr;
            if (w) sites.push_back(site_of<T>(*w, w->q, w->k, c->v, true, sites.size()));  // else dropout: not in eval
        } else if (const auto* f = dynamic_cast<const FusedAttentionNode<T>*>(n)) {
            sites.push_back(site_of<T>(*f, f->q, f->k, f->v, false, sites.size()));
        } else if (const auto* m = dynamic_cast<const MemoryEfficientAttentionNode<T>*>(n)) {
            sites.push_back(site_of<T>(*m, m->q, m->k, m->v, false, sites.size()));
        }
    }
    return sites;
}

// The gradient buffer of a node as T values (null when no gradient reached it).
template <Real T>
const T* grad_of(const Node& node) {
    return static_cast<const T*>(node.grad_view().data);
}

// The (B·H, L, S) block of sequence b as (H, L, S) doubles.
template <Real T>
std::vector<double> sequence_block(const T* all, std::size_t b, std::size_t H, std::size_t L, std::size_t S) {
    std::vector<double> out(H * L * S, 0.0);
    if (all)
        for (std::size_t k = 0; k < out.size(); ++k) out[k] = double(all[b * H * L * S + k]);
    return out;
}

// What one site holds for sequence b, (H, L, S) each: P, dP, the scores and dS, read in one pass
// over the node's internals (a one-op node recomputes them all at once); on the two-op path P and
// dP are the weights node's own value and gradient. A gradient no backward reached is all zero.
struct SiteArrays {
    std::vector<double> weights, dweights, scores, dscores;
};

template <Real T>
SiteArrays site_arrays(const SiteNodes<T>& s, std::size_t b) {
    const std::size_t H = s.q->layout.heads, L = s.q->layout.len, S = s.k->layout.len;
    SiteArrays a;
    if (s.two_op) {
        a.weights = sequence_block(s.node->value.data(), b, H, L, S);
        a.dweights = sequence_block(grad_of<T>(*s.node), b, H, L, S);
    }
    s.node->for_each_internal([&](const char* name, const char*, const ArrayView& value, const ArrayView& grad) {
        const bool scores = std::strcmp(name, "scores") == 0;
        if (!scores && std::strcmp(name, "weights") != 0) return;
        (scores ? a.scores : a.weights) = sequence_block(static_cast<const T*>(value.data), b, H, L, S);
        (scores ? a.dscores : a.dweights) = sequence_block(static_cast<const T*>(grad.data), b, H, L, S);
    });
    return a;
}

// The site as the page draws it: P and the mask (1 where the score is -inf).
template <Real T>
ExploreSite site_forward(const SiteNodes<T>& s, SiteArrays& a) {
    const auto& q = s.q->layout;
    ExploreSite site;
    site.name = s.name;
    site.heads = q.heads, site.queries = q.len, site.keys = s.k->layout.len, site.head_dim = q.head_dim;
    site.masked.assign(a.scores.size(), 0);
    for (std::size_t k = 0; k < a.scores.size(); ++k) site.masked[k] = a.scores[k] == -std::numeric_limits<double>::infinity();
    site.weights = std::move(a.weights);
    return site;
}

// ‖rows‖ per head and token of one head operand's gradient: (H, len).
template <Real T>
std::vector<double> head_norms(const nn::detail::HeadOperand<T>& x, std::size_t b) {
    const auto& l = x.layout;
    std::vector<double> out(l.heads * l.len, 0.0);
    const T* g = x.source ? grad_of<T>(*x.source.node()) : nullptr;
    if (!g) return out;
    for (std::size_t h = 0; h < l.heads; ++h)
        for (std::size_t t = 0; t < l.len; ++t) {
            const T* row = g + l.at(b, h) + t * l.seq_stride;
            double sum = 0;
            for (std::size_t d = 0; d < l.head_dim; ++d) sum += double(row[d]) * double(row[d]);
            out[h * l.len + t] = std::sqrt(sum);
        }
    return out;
}

// (H, len) from a key or value operand's (H_kv, len): a grouped-query attention's query head h
// reads key/value head h / (H / H_kv), whose rows it shows (shared by the H / H_kv heads of a group).
inline std::vector<double> per_query_head(std::vector<double> kv, const nn::detail::HeadLayout& l, std::size_t H) {
    if (l.heads == H) return kv;
    std::vector<double> out;
    for (std::size_t h = 0; h < H; ++h)
        out.insert(out.end(), kv.begin() + long(h / (H / l.heads) * l.len), kv.begin() + long((h / (H / l.heads) + 1) * l.len));
    return out;
}

// dX_h (len, C_in) += dOp_h (len, D) · W_h (D, C_in) for each head h of sequence b, where the
// operand's source is a Linear (x, W) and W_h its rows [offset + h·D, +D). `sums` holds one
// (H, len, C_in) buffer per input x, so the q, k and v of one self-attention add up in one. False
// when the source is not a Linear of its own input.
template <Real T>
bool add_head_inputs(const nn::detail::HeadOperand<T>& op, std::size_t b, std::map<const Node*, std::vector<T>>& sums) {
    if (!op.source) return false;
    const auto* linear = dynamic_cast<const xgrad::detail::LinearNode<T, 3>*>(op.source.node());
    const T* g = grad_of<T>(*op.source.node());
    if (!linear || !linear->x || !linear->weight || !g) return false;
    const auto& l = op.layout;
    const std::size_t D = l.head_dim, C_in = linear->in;
    auto& sum = sums[linear->x.node()];
    sum.resize(l.heads * l.len * C_in, T(0));
    const T* W = linear->weight.value().data();
    for (std::size_t h = 0; h < l.heads; ++h)
        kernels::gemm(kernels::Op::none, kernels::Op::none, l.len, C_in, D, T(1), g + l.at(b, h), l.seq_stride,
                      W + (l.offset + h * D) * C_in, C_in, T(1), sum.data() + h * l.len * C_in, C_in);
    return true;
}

// What the last backward left in site s for sequence b.
template <Real T>
ExploreSiteGrads site_grads(const SiteNodes<T>& s, std::size_t b, SiteArrays& a) {
    const std::size_t H = s.q->layout.heads;
    ExploreSiteGrads g;
    g.dweights = std::move(a.dweights), g.dscores = std::move(a.dscores);
    g.dq = head_norms(*s.q, b), g.dk = per_query_head(head_norms(*s.k, b), s.k->layout, H),
    g.dv = per_query_head(head_norms(*s.v, b), s.v->layout, H);
    std::map<const Node*, std::vector<T>> sums;
    if (add_head_inputs(*s.q, b, sums) && add_head_inputs(*s.k, b, sums) && add_head_inputs(*s.v, b, sums)) {
        g.head_input.assign(H, 0.0);
        for (const auto& [input, sum] : sums) {
            const std::size_t per_head = sum.size() / H;
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t k = 0; k < per_head; ++k) {
                    const double x = double(sum[h * per_head + k]);
                    g.head_input[h] += x * x;
                }
        }
        for (double& x : g.head_input) x = std::sqrt(x);
    }
    return g;
}

// The loss positions offered: [first, end) when `count` covers them, else `count` evenly spaced,
// the last always included.
inline std::vector<long> loss_positions(std::size_t first, std::size_t end, std::size_t count) {
    std::vector<long> out;
    const std::size_t n = end - first;
    if (count == 0 || n == 0) return out;
    for (std::size_t k = 0; k < std::min(count, n); ++k)
        out.push_back(long(first + (count >= n ? k : count == 1 ? n - 1 : (k * (n - 1) + (count - 1) / 2) / (count - 1))));
    return out;
}

// ‖grad‖ per token of sequence b of a (B, T, C) (batch_first), (T, B, C) or (T, C) gradient.
inline std::vector<double> token_norms(const ArrayView& grad, bool batch_first, std::size_t b) {
    const auto& s = grad.shape;
    const bool batched = s.size() == 3;
    const std::size_t T = batched && batch_first ? s[1] : s[0], B = batched ? (batch_first ? s[0] : s[1]) : 1,
                      C = s.back();
    std::vector<double> out(T, 0.0);
    if (!grad.data) return out;
    for (std::size_t t = 0; t < T; ++t) {
        const std::size_t row = batched && batch_first ? b * T + t : t * B + b;
        double sum = 0;
        for (std::size_t c = 0; c < C; ++c) {
            const double g = grad.is_double ? static_cast<const double*>(grad.data)[row * C + c]
                                            : double(static_cast<const float*>(grad.data)[row * C + c]);
            sum += g * g;
        }
        out[t] = std::sqrt(sum);
    }
    return out;
}

// The gradient of the node labelled `label`, an op on the tape or a leaf one reads (where a
// saliency is read).
inline ArrayView labelled_grad(const Tape& tape, const std::string& label) {
    const Node* found = nullptr;
    for (std::size_t i = 0; i < tape.size() && !found; ++i) {
        if (tape[i].label == label) found = &tape[i];
        tape[i].for_each_input([&](const Node& in) {
            if (!found && in.label == label) found = &in;
        });
    }
    if (!found) throw value_error("explore: no node named \"" + label + "\" on the tape");
    return found->grad_view();
}

// What one loss's forward and backward gives besides the tape.
struct Recorded {
    double loss = 0;
    std::vector<std::vector<double>> saliency;  // per input of ExploreData::inputs
};
using Record = std::function<Recorded(long position, const Tape& tape)>;

// Reads the sites of a tape recorded in T into `data` (the first time) and `choice`; false when
// the tape holds no attention in T.
template <Real T>
bool read_sites(const Tape& tape, std::size_t b, ExploreData& data, ExploreChoice& choice) {
    const auto sites = attention_sites<T>(tape);
    if (sites.empty()) return false;
    data.dtype = std::is_same_v<T, double> ? "float64" : "float32";
    const bool first = data.sites.empty();
    for (const auto& s : sites) {
        SiteArrays a = site_arrays(s, b);
        if (first) data.sites.push_back(site_forward(s, a));
        choice.sites.push_back(site_grads(s, b, a));
    }
    return true;
}

// Runs record(-1, tape) and record(p, tape) for each position, each on a fresh tape, and reads
// every attention of it for sequence b. `label(p)` names position p's loss.
inline void collect(ExploreData& data, const std::vector<long>& positions, const std::function<std::string(long)>& label,
                    std::size_t b, const Record& record) {
    std::vector<long> all{-1};
    all.insert(all.end(), positions.begin(), positions.end());
    for (const long p : all) {
        Tape tape;
        TapeScope on(tape);
        Recorded r = record(p, tape);
        ExploreChoice& c = data.choices.emplace_back();
        c.label = p < 0 ? "whole loss" : label(p), c.position = p, c.loss = r.loss, c.saliency = std::move(r.saliency);
        if (!read_sites<float>(tape, b, data, c) && !read_sites<double>(tape, b, data, c))
            throw value_error("explore: the model recorded no attention (the reference path is not read)");
    }
}

// The inputs of the Transformer family's attentions by their module paths: multihead_attn reads
// the target's queries and the memory's keys; self_attn under "encoder", or where there is no
// target (tgt -1), the source (or memory); any other self_attn the target.
inline std::pair<long, long> transformer_site_inputs(const std::string& name, long source, long target) {
    if (name.find("multihead_attn") != std::string::npos) return {target, source};
    if (name.find("encoder") != std::string::npos || target < 0) return {source, source};
    return {target, target};
}
inline void set_transformer_inputs(ExploreData& data, long source, long target) {
    for (auto& s : data.sites) std::tie(s.query_input, s.key_input) = transformer_site_inputs(s.name, source, target);
}

// The sources other than the model checkpoints (study/explore_folders.cpp).
ExploreData explore_attention_folder(const ExploreOptions& o);
ExploreData explore_transformer_folder(const ExploreOptions& o);
ExploreData explore_gpt_folder(const ExploreOptions& o);

// A decoder's losses on idx (B, T) for sequence b (the mean cross-entropy of the next tokens;
// position p's keeps target (b, p) alone), its saliency ‖dL/dx_t‖ at hook_embed (the token
// embeddings; a GPT's sum with the positions' has the same gradient); the first input is the tokens.
template <class Model>
void collect_decoder(ExploreData& data, const Model& model, const xt::xtensor<std::int64_t, 2>& idx,
                     const xt::xtensor<std::int64_t, 2>& targets, std::size_t b, const std::vector<long>& positions,
                     const std::function<std::string(long)>& label) {
    collect(data, positions, label, b, [&](long p, const Tape&) {
        xt::xtensor<std::int64_t, 2> chosen = targets;
        if (p >= 0) chosen.fill(-1), chosen(b, std::size_t(p)) = targets(b, std::size_t(p));  // -1: ignored
        using T = typename decltype(model(idx))::value_type;
        xt::xtensor<T, 3> embed_grad;
        Hooks hooks;
        hooks.backward("hook_embed", [&](xt::xtensor<T, 3>& g) { embed_grad = g; });
        const UseHooks use(hooks);
        const auto loss = nn::gpt_loss(model(idx), chosen);
        backward(loss);
        if (embed_grad.size() == 0) throw value_error("explore: the model has no hook_embed point to read the saliency at");
        const ArrayView grad{{embed_grad.shape().begin(), embed_grad.shape().end()}, embed_grad.data(), std::is_same_v<T, double>};
        return Recorded{double(loss.value()()), {token_norms(grad, true, b)}};
    });
}

}  // namespace xgrad::cli::explore_detail
