// The checkpoints `xgrad explore` runs (study/explore.hpp; the folders: explore_folders.cpp), each
// as a `record(position, tape)` that records one forward and backward: of the whole loss (position
// -1) or of one position's. One driver, collect(), reads every attention of each tape
// (explore_collect.hpp).
//
//   a decoder: a `train gpt` checkpoint, a GPT-2 folder in Hugging Face's layout, an llm.c .bin (with
//       --tokens); a `train llama` checkpoint, a Llama folder, a llama2.c .bin (with --tokens): the
//       mean cross-entropy over the input's next tokens; position t's loss predicts token t + 1.
//       Saliency at hook_embed (the token embeddings).
//   a `train copy` checkpoint: the cross-entropy of the copied half; position n + k's loss predicts
//       a(k+1). Saliency at the embedding (tokens + positions).
//   a `train sort` checkpoint: the cross-entropy of the sorted digits (teacher forcing); position k's
//       loss predicts the k-th. Saliency at the source's and the target's embeddings.
#include "study/explore.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/core.h>

#include "study/explore_collect.hpp"
#include "study/heads.hpp"
#include "tasks/copy.hpp"
#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"
#include "tasks/sort.hpp"
#include "study/transformer.hpp"
#include "xgrad/inspect/attribution.hpp"
#include "xgrad/io/checkpoint.hpp"

namespace xgrad::cli {
namespace {

using namespace explore_detail;

// The clean/corrupted pair: --text and --corrupt-text.
template <class Model>
ExplorePatching explore_patching(const Model& model, const text::Tokenizer& tokenizer, const ExploreOptions& o) {
    PatchTexts texts = o.patch;
    texts.clean = o.text;
    const PatchRuns runs = patch_runs(tokenizer, model.decoding().positions, texts);
    ExplorePatching p;
    p.metric = runs.metric_label;
    for (std::size_t t = 0; t < runs.clean.shape()[1]; ++t)
        p.clean_tokens.push_back(gpt_task::token_label(tokenizer, runs.clean(0, t))),
            p.corrupt_tokens.push_back(gpt_task::token_label(tokenizer, runs.corrupt(0, t)));
    const patching::PatchSets heads{.head_pos = false, .resid_pre = false, .attn_out = false, .mlp_out = false};
    const patching::Result exact = patching::activation_patching(model, runs.clean, runs.corrupt, runs.metric, 256, heads);
    p.clean_metric = exact.from, p.corrupt_metric = exact.into;
    p.heads = head_effects(exact, patching::attribution_patching(model, runs.clean, runs.corrupt, runs.metric, heads));
    const auto lens = [&](const patching::Ids& ids) {
        const auto v = patching::logit_lens(model, ids, runs.metric);
        return std::vector<double>(v.begin(), v.end());
    };
    p.lens_clean = lens(runs.clean), p.lens_corrupt = lens(runs.corrupt);
    return p;
}

// What the page says of a decoder: its title's family and its shape.
std::string decoder_summary(const nn::GPT<float>& m) {
    const auto& c = m.config;
    return fmt::format("GPT, {} layers × {} heads, embedding {}, block {}", c.n_layer, c.n_head, c.n_embd, c.block_size);
}
std::string decoder_summary(const nn::Llama<float>& m) {
    const auto& c = m.config;
    return fmt::format("Llama, {} layers × {} heads ({} key/value{}), dim {}, max_seq_len {}", c.n_layers, c.n_heads,
                       c.kv_heads(), c.kv_heads() < c.n_heads ? ": a query head's ‖dK‖, ‖dV‖ are its group's" : "",
                       c.dim, c.max_seq_len);
}

// A GPT or a Llama (gpt_task::LoadedModel, llama_task::LoadedLlama) on one input.
template <class Loaded>
ExploreData explore_decoder(Loaded m, const ExploreOptions& o) {
    auto& model = m.model;
    const nn::DecodingShape shape = model.decoding();
    const std::string source = o.source.string();
    std::optional<text::Corpus> corpus;
    auto corpus_text = [&]() -> const text::Corpus& {
        if (!corpus) corpus = o.corpus.empty() ? gpt_task::default_corpus() : text::Corpus::map_file(o.corpus);
        return *corpus;
    };
    std::vector<std::int64_t> ids = o.tokens;
    std::string input = fmt::format("{} given tokens", ids.size());
    if (!o.text.empty() && !ids.empty()) throw value_error("--text and --tokens: give one input, not both");
    if (!o.patch.corrupt.empty() && (o.text.empty() || !m.tokenizer))
        throw value_error("--corrupt-text: give the clean input as --text, to a model with a tokenizer");
    if (ids.empty() && !m.tokenizer)
        throw value_error(source + ": an llm.c or llama2.c model has no tokenizer here; give --tokens");
    if (!o.text.empty()) {
        ids = m.tokenizer->encode(o.text, "--text"), input = "--text";
    } else if (ids.empty()) {
        const text::Windows windows(corpus_text(), *m.tokenizer, 0.1);
        const std::size_t first = windows.tokens(text::Split::train);
        const std::size_t n = std::min(o.length + 1, windows.tokens(text::Split::val));
        windows.read(first, n, [&](std::size_t, std::int64_t id) { ids.push_back(id); });
        input = fmt::format("the first {} tokens of the held-out text of {}", n - 1, corpus_text().name());
    }
    for (const std::int64_t id : ids)  // past usable_vocab: an llm.c file's padding rows
        if (id < 0 || std::size_t(id) >= m.usable_vocab)
            throw value_error(fmt::format("--tokens: token {} is outside the vocabulary [0, {})", id, m.usable_vocab));
    if (ids.size() < 2) throw value_error("--text or --tokens: the input needs 2 tokens or more (inputs and next-token targets)");
    if (ids.size() > shape.positions + 1) ids.erase(ids.begin(), ids.end() - long(shape.positions + 1));  // nanoGPT's crop
    const std::size_t T = ids.size() - 1;
    xt::xtensor<std::int64_t, 2> idx = xt::xtensor<std::int64_t, 2>::from_shape({1, T}), targets = idx;
    for (std::size_t t = 0; t < T; ++t) idx(0, t) = ids[t], targets(0, t) = ids[t + 1];
    auto shown = [&](std::int64_t id) { return m.tokenizer ? gpt_task::token_label(*m.tokenizer, id) : std::to_string(id); };

    ExploreData data;
    const std::string summary = decoder_summary(model);
    data.title = fmt::format("{} {}", summary.substr(0, summary.find(',')), o.source_name());
    data.description = fmt::format("{}; input: {}; loss: cross-entropy of the next token", summary, input);
    ExploreInput& tokens = data.inputs.emplace_back(ExploreInput{"tokens", {}});
    for (std::size_t t = 0; t < T; ++t) tokens.tokens.push_back(shown(ids[t]));
    collect_decoder(data, model, idx, targets, 0, loss_positions(0, T, o.positions), [&](long p) {
        return fmt::format("position {}: '{}' predicts '{}'", p, shown(ids[std::size_t(p)]), shown(ids[std::size_t(p) + 1]));
    });
    if (!o.patch.corrupt.empty()) data.patching = explore_patching(model, *m.tokenizer, o);
    if (o.head_sequences > 0 && m.tokenizer) {
        const text::Windows windows(corpus_text(), *m.tokenizer, 0.1);
        const GptHeadStudy study = study_gpt_heads(model, windows, std::size_t(o.head_sequences), o.seed);
        for (const HeadReport& r : study.heads) data.sites.at(r.layer).head_reports.push_back(r);
        data.heads_note = fmt::format("`xgrad heads` on {} held-out windows of {} tokens (val loss {:.4f}); induction on "
                                      "random tokens repeated twice", o.head_sequences, shape.positions, study.val_loss);
    }
    return data;
}

// A task's model (copy_task::Model, sort_task::Model) from its checkpoint, in eval mode.
template <class Model>
Model load_task_model(const ExploreOptions& o, const io::CheckpointConfig& config) {
    Generator init(0);
    Model model(decltype(Model::options)::from_config(config, o.source.string()), init);
    io::load_state_dict(model, o.source);
    set_training(model, false);
    return model;
}

// --tokens as a task's input: `count` tokens in [0, vocab); `task` says what it takes ("the copy task copies").
void check_tokens(const std::vector<std::int64_t>& tokens, std::size_t count, std::size_t vocab, const char* task) {
    if (tokens.size() != count) throw value_error(fmt::format("--tokens: {} {} tokens, got {}", task, count, tokens.size()));
    for (const std::int64_t t : tokens)
        if (t < 0 || std::size_t(t) >= vocab) throw value_error(fmt::format("--tokens: token {} is outside [0, {})", t, vocab));
}

ExploreData explore_copy(const ExploreOptions& o, const io::CheckpointConfig& config) {
    auto model = load_task_model<copy_task::Model<float>>(o, config);  // the head study ablates it
    const auto& options = model.options;
    const std::size_t n = options.seq;
    Generator gen(o.seed);
    copy_task::Batch batch = copy_task::make_batch(1, n, options.vocab, gen);
    if (!o.tokens.empty()) {  // a1 .. an: the sequence to copy
        check_tokens(o.tokens, n, options.vocab, "the copy task copies");
        for (std::size_t k = 0; k < n; ++k) {
            batch.tokens(0, k) = batch.targets(k) = o.tokens[k];
            if (k + 1 < n) batch.tokens(0, n + 1 + k) = o.tokens[k];
        }
    }
    ExploreData data;
    data.title = fmt::format("copy task {}", o.source_name());
    data.description = fmt::format("copy task: {} tokens, a separator, the same tokens; vocabulary {}, embedding {}, {} "
                                   "heads, {}; input: {}; loss: cross-entropy of the copied half", n, options.vocab,
                                   options.embed, options.heads, options.causal ? "causal" : "not causal",
                                   o.tokens.empty() ? "a held-out sequence" : "--tokens");
    ExploreInput& tokens = data.inputs.emplace_back(ExploreInput{"tokens", {}});
    for (std::size_t t = 0; t < 2 * n; ++t) tokens.tokens.push_back(t == n ? "|" : std::to_string(batch.tokens(0, t)));
    collect(data, loss_positions(n, 2 * n, o.positions),
                   [&](long p) { return fmt::format("position {}: predicts {}", p, batch.targets(std::size_t(p) - n)); }, 0,
                   [&](long p, const Tape& tape) {
                       xt::xtensor<std::int64_t, 1> chosen = batch.targets;
                       if (p >= 0) chosen.fill(-100), chosen(std::size_t(p) - n) = batch.targets(std::size_t(p) - n);
                       const auto loss = cross_entropy(model(batch.tokens), chosen);
                       backward(loss);
                       return Recorded{double(loss.value()()), {token_norms(labelled_grad(tape, "embedding"), true, 0)}};
                   });
    if (o.head_sequences > 0) {
        const CopyHeadStudy study = study_copy_heads(model, std::size_t(o.head_sequences), o.seed);
        data.sites.at(0).head_reports = study.heads;
        data.heads_note = fmt::format("`xgrad heads` on {} held-out sequences (loss {:.4f}, token accuracy {:.4f})",
                                      o.head_sequences, study.loss, study.accuracy);
    }
    return data;
}

ExploreData explore_sort(const ExploreOptions& o, const io::CheckpointConfig& config) {
    const auto model = load_task_model<sort_task::Model<float>>(o, config);
    const auto& options = model.options;
    const std::size_t n = options.seq;
    Generator gen(o.seed);
    sort_task::Batch batch = sort_task::make_batch(1, n, options.vocab, gen);
    if (!o.tokens.empty()) {  // the digits to sort
        check_tokens(o.tokens, n, options.vocab, "the model sorts");
        std::copy(o.tokens.begin(), o.tokens.end(), batch.src.begin());
        std::vector<std::int64_t> sorted(o.tokens);
        std::sort(sorted.begin(), sorted.end());
        for (std::size_t k = 0; k < n; ++k) batch.targets(k) = sorted[k], batch.tgt_in(0, k) = k ? sorted[k - 1] : batch.tgt_in(0, 0);
    }
    ExploreData data;
    data.title = fmt::format("sort task {}", o.source_name());
    data.description = fmt::format("sort task: {} digits in [0, {}) in, sorted out; Transformer {} + {} layers, d_model {}, "
                                   "{} heads; input: {}; loss: cross-entropy of the sorted digits (teacher forcing)", n,
                                   options.vocab, options.layers, options.layers, options.d_model, options.heads,
                                   o.tokens.empty() ? "a held-out sequence" : "--tokens");
    ExploreInput& src = data.inputs.emplace_back(ExploreInput{"source", {}});
    for (std::size_t t = 0; t < n; ++t) src.tokens.push_back(std::to_string(batch.src(0, t)));
    ExploreInput& tgt = data.inputs.emplace_back(ExploreInput{"target", {}});
    for (std::size_t t = 0; t < n; ++t) tgt.tokens.push_back(t ? std::to_string(batch.tgt_in(0, t)) : "BOS");
    data.loss_input = 1;
    collect(data, loss_positions(0, n, o.positions),
                   [&](long p) { return fmt::format("target position {}: predicts {}", p, batch.targets(std::size_t(p))); }, 0,
                   [&](long p, const Tape& tape) {
                       xt::xtensor<std::int64_t, 1> chosen = batch.targets;
                       if (p >= 0) chosen.fill(-100), chosen(std::size_t(p)) = batch.targets(std::size_t(p));
                       const auto loss = cross_entropy(model(batch), chosen);
                       backward(loss);
                       return Recorded{double(loss.value()()), {token_norms(labelled_grad(tape, "source"), true, 0),
                                                                token_norms(labelled_grad(tape, "target"), true, 0)}};
                   });
    set_transformer_inputs(data, 0, 1);
    data.heads_note = "no head reports: `xgrad heads` studies copy-task and GPT checkpoints";
    return data;
}

}  // namespace

ExploreData explore(const ExploreOptions& o) {
    const auto decoders_only = [&] {  // the other models have no tokenizer to read a corrupted text
        if (!o.patch.corrupt.empty())
            throw value_error("--corrupt-text: " + o.source.string() + " is not a GPT's or a Llama's checkpoint or folder");
    };
    if (llama_task::is_llama(o.source)) return explore_decoder(llama_task::load_llama(o.source), o);
    if (o.gpt_folder || io::is_gpt_folder(o.source) || o.source.extension() == ".bin")
        return explore_decoder(gpt_task::load_model(o.source), o);
    if (std::filesystem::is_directory(o.source)) {
        decoders_only();
        if (is_transformer_folder(o.source)) return explore_transformer_folder(o);
        if (std::filesystem::exists(o.source / "idx.npy")) return explore_gpt_folder(o);
        return explore_attention_folder(o);
    }
    const auto config = io::read_checkpoint_config(o.source);
    if (config.count("n_layer")) return explore_decoder(gpt_task::load_model(o.source), o);
    decoders_only();
    if (config.count("d_model")) return explore_sort(o, config);
    return explore_copy(o, config);
}

}  // namespace xgrad::cli
