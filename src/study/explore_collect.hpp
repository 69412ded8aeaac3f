// The attention sites of a recorded tape, read for `xgrad explore` (study/explore.hpp): every
// attention, on whichever path it ran (nn/attention/paths.hpp). Values are copied for one sequence
// b of the batch. What a node does not keep (the scores and dS; P and dP of the one-op paths) comes
// from its for_each_internal, recomputed as `xgrad inspect` shows it (inspect/attention.hpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "study/explore.hpp"
#include "xgrad/nn/attention/paths.hpp"
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

// f(value, grad) of the internal `name` ("scores", "weights") of a site's node, as inspect shows it.
template <class F>
void with_internal(const Node& node, const char* name, F f) {
    node.for_each_internal([&](const char* n, const char*, const ArrayView& value, const ArrayView& grad) {
        if (std::strcmp(n, name) == 0) f(value, grad);
    });
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

// P and the mask of sequence b.
template <Real T>
ExploreSite site_forward(const SiteNodes<T>& s, std::size_t b) {
    const auto& q = s.q->layout;
    ExploreSite site;
    site.name = s.name;
    site.heads = q.heads, site.queries = q.len, site.keys = s.k->layout.len, site.head_dim = q.head_dim;
    const std::size_t H = site.heads, L = site.queries, S = site.keys;
    if (s.two_op) site.weights = sequence_block(s.node->value.data(), b, H, L, S);
    with_internal(*s.node, "weights", [&](const ArrayView& value, const ArrayView&) {
        site.weights = sequence_block(static_cast<const T*>(value.data), b, H, L, S);
    });
    site.masked.assign(H * L * S, 0);
    with_internal(*s.node, "scores", [&](const ArrayView& value, const ArrayView&) {
        const T* scores = static_cast<const T*>(value.data) + b * H * L * S;
        for (std::size_t k = 0; k < site.masked.size(); ++k) site.masked[k] = scores[k] == -std::numeric_limits<T>::infinity();
    });
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

// dX_h (len, C_in) += dOp_h · W_h for each head h, where the operand's source is a Linear (x, W):
// rows [offset + h·D, +D) of W (out, C_in) made the head. `sums` holds one (H, rows of x, C_in)
// buffer per input x, so the q, k and v of one self-attention add up in one buffer. False when the
// source is not a Linear of its own input.
template <Real T>
bool add_head_inputs(const nn::detail::HeadOperand<T>& op, std::size_t b,
                     std::map<const Node*, std::vector<double>>& sums) {
    if (!op.source) return false;
    const auto* linear = dynamic_cast<const xgrad::detail::LinearNode<T, 3>*>(op.source.node());
    const T* g = grad_of<T>(*op.source.node());
    if (!linear || !linear->x || !linear->weight || !g) return false;
    const auto& l = op.layout;
    const std::size_t D = l.head_dim, C_src = op.source.shape(2), C_in = linear->in;
    const std::size_t rows = op.source.size() / C_src;
    auto& sum = sums[linear->x.node()];
    sum.resize(l.heads * rows * C_in, 0.0);
    const T* W = linear->weight.value().data();
    for (std::size_t h = 0; h < l.heads; ++h)
        for (std::size_t t = 0; t < l.len; ++t) {
            const std::size_t row = (b * l.batch_stride + t * l.seq_stride) / C_src;
            const T* dop = g + l.at(b, h) + t * l.seq_stride;  // (D)
            double* dx = sum.data() + (h * rows + row) * C_in;
            for (std::size_t d = 0; d < D; ++d) {
                const T* w = W + (l.offset + h * D + d) * C_in;
                for (std::size_t c = 0; c < C_in; ++c) dx[c] += double(dop[d]) * double(w[c]);
            }
        }
    return true;
}

// What the last backward left in site s for sequence b.
template <Real T>
ExploreSiteGrads site_grads(const SiteNodes<T>& s, std::size_t b) {
    const std::size_t H = s.q->layout.heads, L = s.q->layout.len, S = s.k->layout.len;
    ExploreSiteGrads g;
    g.dweights.assign(H * L * S, 0.0), g.dscores.assign(H * L * S, 0.0);
    if (s.two_op) g.dweights = sequence_block(grad_of<T>(*s.node), b, H, L, S);
    with_internal(*s.node, "weights", [&](const ArrayView&, const ArrayView& grad) {
        g.dweights = sequence_block(static_cast<const T*>(grad.data), b, H, L, S);
    });
    with_internal(*s.node, "scores", [&](const ArrayView&, const ArrayView& grad) {
        g.dscores = sequence_block(static_cast<const T*>(grad.data), b, H, L, S);
    });
    g.dq = head_norms(*s.q, b), g.dk = head_norms(*s.k, b), g.dv = head_norms(*s.v, b);
    std::map<const Node*, std::vector<double>> sums;
    if (add_head_inputs(*s.q, b, sums) && add_head_inputs(*s.k, b, sums) && add_head_inputs(*s.v, b, sums)) {
        g.head_input.assign(H, 0.0);
        for (const auto& [input, sum] : sums) {
            const std::size_t per_head = sum.size() / H;
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t k = 0; k < per_head; ++k) g.head_input[h] += sum[h * per_head + k] * sum[h * per_head + k];
        }
        for (double& x : g.head_input) x = std::sqrt(x);
    }
    return g;
}

}  // namespace xgrad::cli::explore_detail
