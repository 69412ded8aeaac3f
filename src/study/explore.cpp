// The models `xgrad explore` runs (study/explore.hpp), each as a `record(position)` that records
// one forward and backward on the current tape: of the whole loss (position -1) or of one
// position's. One driver, collect(), reads every attention of each tape (explore_collect.hpp).
//
//   a `train gpt` checkpoint (or an llm.c .bin with --tokens): nanoGPT's mean cross-entropy over the
//       input's next tokens; position t's loss predicts token t + 1. Saliency at the blocks' input
//       (the node named "embedding": wte + wpe).
//   a `train copy` checkpoint: the cross-entropy of the copied half; position n + k's loss predicts
//       a(k+1). Saliency at the embedding (tokens + positions).
//   an `xgrad attention` folder: the loss whose gradient is grad_output.npy, L = Σ O ⊙ G; position
//       t's loss keeps G's rows of query t (of the sequence explored). Saliency at the query input.
#include "study/explore.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <variant>

#include <fmt/core.h>

#include "study/attention.hpp"
#include "study/explore_collect.hpp"
#include "study/heads.hpp"
#include "tasks/copy.hpp"
#include "tasks/gpt.hpp"
#include "xgrad/io/checkpoint.hpp"

namespace xgrad::cli {
namespace {

using explore_detail::attention_sites;

// The loss positions offered: [first, end) when `count` covers them, else `count` evenly spaced,
// the last always included.
std::vector<long> loss_positions(std::size_t first, std::size_t end, std::size_t count) {
    std::vector<long> out;
    const std::size_t n = end - first;
    if (count == 0 || n == 0) return out;
    if (count >= n) {
        for (std::size_t t = first; t < end; ++t) out.push_back(long(t));
        return out;
    }
    for (std::size_t k = 0; k < count; ++k) {
        const std::size_t step = count == 1 ? n - 1 : (k * (n - 1) + (count - 1) / 2) / (count - 1);
        out.push_back(long(first + (count == 1 ? n - 1 : step)));
    }
    return out;
}

// ‖grad‖ per token of sequence b of a (B, T, C) (batch_first), (T, B, C) or (T, C) gradient.
std::vector<double> token_norms(const ArrayView& grad, bool batch_first, std::size_t b) {
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

// The gradient of the node labelled `label` on the tape (the saliency's input).
ArrayView labelled_grad(const Tape& tape, const std::string& label) {
    for (std::size_t i = 0; i < tape.size(); ++i)
        if (tape[i].label == label) return tape[i].grad_view();
    throw value_error("explore: no node named \"" + label + "\" on the tape");
}

struct Recorded {
    double loss = 0;
    std::vector<double> saliency;
};

// Runs record(-1, tape) and record(p, tape) for each position, each on a fresh tape, and reads every
// attention of it.
template <Real T>
void collect(ExploreData& data, const std::vector<long>& positions, const std::function<std::string(long)>& label,
             std::size_t sequence, const std::function<Recorded(long, const Tape&)>& record) {
    data.dtype = std::is_same_v<T, double> ? "float64" : "float32";
    std::vector<long> all{-1};
    all.insert(all.end(), positions.begin(), positions.end());
    for (const long p : all) {
        Tape tape;
        TapeScope on(tape);
        const Recorded r = record(p, tape);
        const auto sites = attention_sites<T>(tape);
        if (sites.empty()) throw value_error("explore: the model recorded no attention (the reference path is not read)");
        if (data.sites.empty())
            for (const auto& s : sites) data.sites.push_back(explore_detail::site_forward(s, sequence));
        ExploreChoice c;
        c.label = p < 0 ? "whole loss" : label(p), c.position = p, c.loss = r.loss, c.saliency = r.saliency;
        for (const auto& s : sites) c.sites.push_back(explore_detail::site_grads(s, sequence));
        data.choices.push_back(std::move(c));
    }
}

// Keys of self-attention are the input tokens; others have no label (the page numbers them).
void label_keys(ExploreData& data) {
    for (auto& s : data.sites) {
        s.key_tokens.clear();
        for (std::size_t j = 0; j < s.keys; ++j)
            s.key_tokens.push_back(s.keys == data.tokens.size() ? data.tokens[j] : "");
    }
}

ExploreData explore_gpt(const ExploreOptions& o) {
    gpt_task::LoadedModel m = gpt_task::load_model(o.source);
    nn::GPT<float>& model = m.model;
    const auto& c = model.config;
    const std::string source = o.source.string();
    std::optional<text::Corpus> corpus;
    auto corpus_text = [&]() -> const text::Corpus& {
        if (!corpus) corpus = o.corpus.empty() ? gpt_task::default_corpus() : text::Corpus::map_file(o.corpus);
        return *corpus;
    };
    std::vector<std::int64_t> ids = o.tokens;
    std::string input = fmt::format("{} given tokens", ids.size());
    if (ids.empty() && !m.tokenizer) throw value_error(source + ": an llm.c model has no tokenizer here; give --tokens");
    if (!o.text.empty()) {
        ids = m.tokenizer->encode(o.text, "--text"), input = "--text";
    } else if (ids.empty()) {
        const text::Windows windows(corpus_text(), *m.tokenizer, 0.1);
        const std::size_t first = windows.tokens(text::Split::train);
        const std::size_t n = std::min(o.length + 1, windows.tokens(text::Split::val));
        windows.read(first, n, [&](std::size_t, std::int64_t id) { ids.push_back(id); });
        input = fmt::format("the first {} tokens of the held-out text of {}", n - 1, corpus_text().name());
    }
    for (const std::int64_t id : ids)
        if (id < 0 || std::size_t(id) >= c.vocab_size)
            throw value_error(fmt::format("--tokens: token {} is outside the vocabulary [0, {})", id, c.vocab_size));
    if (ids.size() < 2) throw value_error("explore: the input needs 2 tokens or more (inputs and next-token targets)");
    if (ids.size() > c.block_size + 1) ids.erase(ids.begin(), ids.end() - long(c.block_size + 1));  // nanoGPT's crop
    const std::size_t T = ids.size() - 1;
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, T}), targets = idx;
    for (std::size_t t = 0; t < T; ++t) idx(0, t) = ids[t], targets(0, t) = ids[t + 1];
    auto shown = [&](std::int64_t id) { return m.tokenizer ? gpt_task::token_label(*m.tokenizer, id) : std::to_string(id); };

    ExploreData data;
    data.title = fmt::format("GPT {}", o.source.filename().string());
    data.description = fmt::format("GPT, {} layers × {} heads, embedding {}, block {}; input: {}; loss: cross-entropy "
                                   "of the next token (nanoGPT's)", c.n_layer, c.n_head, c.n_embd, c.block_size, input);
    for (std::size_t t = 0; t < T; ++t) data.tokens.push_back(shown(ids[t]));
    collect<float>(data, loss_positions(0, T, o.positions),
                   [&](long p) { return fmt::format("position {}: '{}' predicts '{}'", p, shown(ids[p]), shown(ids[p + 1])); },
                   0, [&](long p, const Tape& tape) {
                       xt::xtensor<std::int64_t, 2> chosen = targets;
                       if (p >= 0) chosen.fill(-1), chosen(0, p) = targets(0, p);  // -1: ignored (nanoGPT's)
                       const auto loss = nn::gpt_loss(model(idx), chosen);
                       backward(loss);
                       return Recorded{double(loss.value()()), token_norms(labelled_grad(tape, "embedding"), true, 0)};
                   });
    label_keys(data);
    if (o.head_sequences > 0 && m.tokenizer) {
        const text::Windows windows(corpus_text(), *m.tokenizer, 0.1);
        const GptHeadStudy study = study_gpt_heads(model, windows, std::size_t(o.head_sequences), o.seed);
        for (const HeadReport& r : study.heads) data.sites.at(r.layer).head_reports.push_back(r);
        data.heads_note = fmt::format("`xgrad heads` on {} held-out windows of {} tokens (val loss {:.4f}); induction on "
                                      "random tokens repeated twice", o.head_sequences, c.block_size, study.val_loss);
    }
    return data;
}

ExploreData explore_copy(const ExploreOptions& o, const io::CheckpointConfig& config) {
    const std::string source = o.source.string();
    const auto options = copy_task::ModelOptions::from_config(config, source);
    Generator init(0);
    copy_task::Model<float> model(options, init);
    io::load_state_dict(model, o.source);
    set_training(model, false);
    const std::size_t n = options.seq;
    Generator gen(o.seed);
    copy_task::Batch batch = copy_task::make_batch(1, n, options.vocab, gen);
    if (!o.tokens.empty()) {  // a1 .. an: the sequence to copy
        if (o.tokens.size() != n) throw value_error(fmt::format("--tokens: the copy task copies {} tokens, got {}", n, o.tokens.size()));
        for (std::size_t k = 0; k < n; ++k) {
            if (o.tokens[k] < 0 || std::size_t(o.tokens[k]) >= options.vocab)
                throw value_error(fmt::format("--tokens: token {} is outside [0, {})", o.tokens[k], options.vocab));
            batch.tokens(0, k) = batch.targets(k) = o.tokens[k];
            if (k + 1 < n) batch.tokens(0, n + 1 + k) = o.tokens[k];
        }
    }
    ExploreData data;
    data.title = fmt::format("copy task {}", o.source.filename().string());
    data.description = fmt::format("copy task: {} tokens, a separator, the same tokens; vocabulary {}, embedding {}, {} "
                                   "heads, {}; input: {}; loss: cross-entropy of the copied half", n, options.vocab,
                                   options.embed, options.heads, options.causal ? "causal" : "not causal",
                                   o.tokens.empty() ? "a held-out sequence" : "--tokens");
    for (std::size_t t = 0; t < 2 * n; ++t)
        data.tokens.push_back(t == n ? "|" : std::to_string(batch.tokens(0, t)));
    collect<float>(data, loss_positions(n, 2 * n, o.positions),
                   [&](long p) { return fmt::format("position {}: predicts {}", p, batch.targets(std::size_t(p) - n)); }, 0,
                   [&](long p, const Tape& tape) {
                       xt::xtensor<std::int64_t, 1> chosen = batch.targets;
                       if (p >= 0) chosen.fill(-100), chosen(std::size_t(p) - n) = batch.targets(std::size_t(p) - n);
                       const auto loss = cross_entropy(model(batch.tokens), chosen);
                       backward(loss);
                       return Recorded{double(loss.value()()), token_norms(labelled_grad(tape, "embedding"), true, 0)};
                   });
    label_keys(data);
    if (o.head_sequences > 0) {
        const CopyHeadStudy study = study_copy_heads(model, std::size_t(o.head_sequences), o.seed);
        data.sites.at(0).head_reports = study.heads;
        data.heads_note = fmt::format("`xgrad heads` on {} held-out sequences (loss {:.4f}, token accuracy {:.4f})",
                                      o.head_sequences, study.loss, study.accuracy);
    }
    return data;
}

template <Real T, std::size_t N>
ExploreData explore_attention(AttentionProblem<T, N>& p, const ExploreOptions& o) {
    const bool batch_first = p.mha.options.batch_first, batched = N == 3;
    const auto& qs = p.query.shape();
    const std::size_t L = batched && batch_first ? qs[1] : qs[0], B = batched ? (batch_first ? qs[0] : qs[1]) : 1;
    if (o.sequence >= B) throw value_error(fmt::format("--sequence: the input has {} sequence(s), got {}", B, o.sequence));
    const std::size_t b = o.sequence;
    const bool self_attention = p.key == p.query && p.value == p.query;
    ExploreData data;
    const std::filesystem::path folder = o.source.lexically_normal();
    const auto name = (folder.has_filename() ? folder : folder.parent_path());
    data.title = fmt::format("MultiheadAttention {}", (name.parent_path().filename() / name.filename()).string());
    data.description = fmt::format("MultiheadAttention embed_dim {}, {} heads, {}; query {} {}, sequence {}; loss: Σ "
                                   "output ⊙ grad_output.npy", p.mha.options.embed_dim, p.mha.options.num_heads,
                                   self_attention ? "self-attention" : "query, key and value",
                                   shape_str(p.query.shape()), std::is_same_v<T, double> ? "float64" : "float32", b);
    data.tokens.assign(L, "");  // the page numbers them
    collect<T>(data, loss_positions(0, L, o.positions), [](long t) { return fmt::format("query {}", t); }, b,
               [&](long pos, const Tape&) {
                   const auto query = named(parameter(p.query), self_attention ? "x" : "query");
                   const auto key = self_attention ? query : parameter(p.key);
                   const auto value = self_attention ? query : parameter(p.value);
                   const auto r = p.mha.forward(query, key, value, p.forward_options);
                   xt::xtensor<T, N> seed = p.grad_output;
                   if (pos >= 0) {  // only query pos of sequence b
                       seed.fill(T(0));
                       for (std::size_t e = 0; e < qs.back(); ++e) {
                           const std::size_t at = !batched ? std::size_t(pos) * qs[1] + e
                                                  : batch_first ? (b * L + std::size_t(pos)) * qs[2] + e
                                                                : (std::size_t(pos) * B + b) * qs[2] + e;
                           seed.data()[at] = p.grad_output.data()[at];
                       }
                   }
                   const double loss = double(xt::sum(r.output.value() * seed)());
                   backward(r.output, seed);
                   return Recorded{loss, token_norms(query.node()->grad_view(), batch_first, b)};
               });
    label_keys(data);
    auto& site = data.sites.at(0);
    xt::xtensor<double, 4> w = xt::xtensor<double, 4>::from_shape({1, site.heads, site.queries, site.keys});
    std::copy(site.weights.begin(), site.weights.end(), w.begin());
    for (const HeadScores& s : score_heads(w, p.forward_options.is_causal, 0)) {
        HeadReport& r = site.head_reports.emplace_back();
        r.head = site.head_reports.size() - 1, r.scores = s, r.label = s.label;
    }
    data.heads_note = "labels from this input's weights alone (no ablation: a folder has no task to lose)";
    return data;
}

}  // namespace

ExploreData explore(const ExploreOptions& o) {
    if (std::filesystem::is_directory(o.source)) {
        auto problem = load_attention_problem(o.source);
        return std::visit([&](auto& p) { return explore_attention(p, o); }, problem);
    }
    if (o.source.extension() == ".bin") return explore_gpt(o);
    const auto config = io::read_checkpoint_config(o.source);
    if (config.count("n_layer")) return explore_gpt(o);
    return explore_copy(o, config);
}

}  // namespace xgrad::cli
