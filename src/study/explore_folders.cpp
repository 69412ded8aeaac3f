// The folders `xgrad explore` runs (study/explore.hpp): a PyTorch module given as files, in the
// formats of `xgrad attention`, `xgrad transformer` and `xgrad gpt`. The sequence shown is
// o.sequence of the batch; the whole loss is the folder's own, over every sequence.
//
//   attention, transformer: L = Σ output ⊙ grad_output.npy; position t's loss keeps grad_output's
//       row of query t of the sequence shown (npy_inputs.hpp, keep_output_row). Saliency at the
//       inputs (query, key, value; src, tgt, memory).
//   gpt: nanoGPT's mean cross-entropy over targets.npy; position t's loss keeps target (b, t) alone
//       (positions whose target is -1 have no loss). Saliency at the blocks' input.
#include <fmt/core.h>

#include "study/mha_files.hpp"
#include "study/explore_collect.hpp"
#include "study/gpt_files.hpp"
#include "study/npy_inputs.hpp"
#include "study/transformer.hpp"

namespace xgrad::cli::explore_detail {
namespace {

// A folder's name as its last two parts ("basic/in").
std::string folder_name(const std::filesystem::path& folder) {
    const std::filesystem::path p = folder.lexically_normal();
    const auto name = p.has_filename() ? p : p.parent_path();
    return (name.parent_path().filename() / name.filename()).string();
}

void check_sequence(std::size_t sequence, std::size_t batch) {
    if (sequence >= batch) throw value_error(fmt::format("--sequence: the input has {} sequence(s), got {}", batch, sequence));
}

template <Real T, std::size_t N>
ExploreData explore_attention(AttentionProblem<T, N>& p, const ExploreOptions& o) {
    const bool batch_first = p.mha.options.batch_first, batched = N == 3;
    const auto& qs = p.query.shape();
    const std::size_t L = batched && batch_first ? qs[1] : qs[0], B = batched ? (batch_first ? qs[0] : qs[1]) : 1;
    check_sequence(o.sequence, B);
    const std::size_t b = o.sequence;
    const bool self_attention = p.key == p.query && p.value == p.query;
    const std::size_t S = batched && batch_first ? p.key.shape()[1] : p.key.shape()[0];
    ExploreData data;
    data.title = "MultiheadAttention " + folder_name(o.source);
    data.description = fmt::format("MultiheadAttention embed_dim {}, {} heads, {}; query {} {}, sequence {}; loss: Σ "
                                   "output ⊙ grad_output.npy", p.mha.options.embed_dim, p.mha.options.num_heads,
                                   self_attention ? "self-attention" : "query, key and value", shape_str(p.query.shape()),
                                   std::is_same_v<T, double> ? "float64" : "float32", b);
    data.inputs.push_back({self_attention ? "x" : "query", std::vector<std::string>(L)});
    if (!self_attention) data.inputs.push_back({"key", std::vector<std::string>(S)});
    collect(data, loss_positions(0, L, o.positions), [](long t) { return fmt::format("query {}", t); }, b,
            [&](long pos, const Tape&) {
                const auto query = named(parameter(p.query), self_attention ? "x" : "query");
                const auto key = self_attention ? query : parameter(p.key);
                const auto value = self_attention ? query : parameter(p.value);
                const auto r = p.mha.forward(query, key, value, p.forward_options);
                xt::xtensor<T, N> seed = p.grad_output;
                keep_output_row(reinterpret_cast<std::byte*>(seed.data()), sizeof(T),
                                std::vector<std::size_t>(qs.begin(), qs.end()), batched, batch_first, {b, pos});
                const double loss = double(xt::sum(r.output.value() * seed)());
                backward(r.output, seed);
                Recorded out{loss, {token_norms(query.node()->grad_view(), batch_first, b)}};
                if (!self_attention) out.saliency.push_back(token_norms(key.node()->grad_view(), batch_first, b));
                return out;
            });
    for (auto& s : data.sites) s.key_input = self_attention ? 0 : 1;
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

ExploreData explore_attention_folder(const ExploreOptions& o) {
    auto problem = load_attention_problem(o.source);
    return std::visit([&](auto& p) { return explore_attention(p, o); }, problem);
}

ExploreData explore_transformer_folder(const ExploreOptions& o) {
    const TransformerConfig cfg = read_transformer_config(o.source);
    const bool encodes = cfg.module == "encoder_layer" || cfg.module == "encoder" || cfg.module == "transformer";
    const bool decodes = cfg.module != "encoder_layer" && cfg.module != "encoder";
    ExploreData data;
    data.title = cfg.module + " " + folder_name(o.source);
    // the inputs: src (encoding modules) or memory (decoders), then tgt (decoding modules)
    std::vector<std::string> names{encodes ? "src" : "memory"};
    if (decodes) names.push_back("tgt");
    bool batched = false;
    for (const auto& name : names) {
        const auto a = *read_input(o.source, name);
        batched = a.shape.size() == 3;
        const std::size_t len = batched && cfg.layer.batch_first ? a.shape[1] : a.shape[0];
        if (batched) check_sequence(o.sequence, cfg.layer.batch_first ? a.shape[0] : a.shape[1]);
        data.inputs.push_back({name, std::vector<std::string>(len)});
    }
    const long target = decodes ? 1 : -1;
    data.loss_input = decodes ? 1 : 0;
    const std::size_t L = data.inputs[data.loss_input].tokens.size();
    collect(data, loss_positions(0, L, o.positions), [](long t) { return fmt::format("query {}", t); }, o.sequence,
            [&](long pos, const Tape& tape) {
                const TransformerResults r = compute_transformer(o.source, {o.sequence, pos});
                data.description = r.description;
                Recorded out{r.loss, {}};
                for (const auto& name : names)
                    out.saliency.push_back(token_norms(labelled_grad(tape, name), cfg.layer.batch_first, o.sequence));
                return out;
            });
    set_transformer_inputs(data, 0, target);
    data.heads_note = "no head reports: a folder has no task to lose";
    return data;
}

ExploreData explore_gpt_folder(const ExploreOptions& o) {
    const GptFiles f = read_gpt_files(o.source);
    const auto& c = f.config;
    const std::size_t B = f.idx.shape(0), T = f.idx.shape(1), b = o.sequence;
    check_sequence(b, B);
    ExploreData data;
    data.title = "GPT " + folder_name(o.source);
    data.description = fmt::format("GPT (nanoGPT's files), {} layers × {} heads, embedding {}; idx {}, sequence {}; loss: "
                                   "cross-entropy of targets.npy (nanoGPT's)", c.n_layer, c.n_head, c.n_embd,
                                   shape_str(f.idx.shape()), b);
    ExploreInput& tokens = data.inputs.emplace_back(ExploreInput{"tokens", {}});
    for (std::size_t t = 0; t < T; ++t) tokens.tokens.push_back(std::to_string(f.idx(b, t)));
    std::vector<long> positions;
    for (const long t : loss_positions(0, T, o.positions))
        if (f.targets(b, std::size_t(t)) >= 0) positions.push_back(t);
    const auto label = [&](long t) { return fmt::format("position {}: predicts {}", t, f.targets(b, std::size_t(t))); };
    std::visit([&](const auto& model) { collect_decoder(data, model, f.idx, f.targets, b, positions, label); }, f.model);
    data.heads_note = "no head reports: `xgrad heads` needs a `train gpt` checkpoint and its text";
    return data;
}

}  // namespace xgrad::cli::explore_detail
