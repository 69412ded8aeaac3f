// The heads of a GPT or a Llama (study/heads.hpp) and `xgrad heads` on their checkpoints: for every layer and
// head, the scores of head_analysis.hpp on windows of the val text (previous-token mass = offset -1, first-token mass, uniformity), the
// induction score of Olsson et al. 2022 (on sequences of random tokens repeated twice, the mean
// attention from each token of the second copy to the token after its first occurrence), a label,
// and the importance by ablation (val loss with the head's slice of the output projection, c_proj
// or wo, removed).
#include <filesystem>
#include <string>

#include <fmt/core.h>
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include "tasks/gpt.hpp"
#include "tasks/llama.hpp"
#include "study/heads.hpp"
#include "study/plot.hpp"

namespace xgrad::cli {

namespace {

// The attention's output projection of layer l, whose columns h·D .. (h+1)·D take head h's output.
Var<float, 2>& output_projection(nn::GPT<float>& m, std::size_t l) { return m.transformer.h[l].attn.c_proj.weight; }
Var<float, 2>& output_projection(nn::Llama<float>& m, std::size_t l) { return m.layers[l].attention.wo.weight; }

// (N, H, T, T) per layer: the weights of every head on the sequences idx (N, T).
template <class Model>
std::vector<xt::xtensor<float, 4>> layer_weights(const Model& model, const xt::xtensor<std::int64_t, 2>& idx) {
    const NoGrad no_grad;
    const auto out = model.forward(idx, {.need_weights = true});
    const std::size_t N = idx.shape()[0], T = idx.shape()[1], H = model.decoding().heads;
    std::vector<xt::xtensor<float, 4>> w;
    for (const auto& v : out.attn_weights) {
        xt::xtensor<float, 4> a = xt::xtensor<float, 4>::from_shape({N, H, T, T});
        std::copy(v.value().begin(), v.value().end(), a.begin());  // (N·H, T, T) in that order
        w.push_back(std::move(a));
    }
    return w;
}

template <class Model>
double val_loss(const Model& model, const xt::xtensor<std::int64_t, 2>& x, const xt::xtensor<std::int64_t, 2>& y) {
    const NoGrad no_grad;
    return double(nn::gpt_loss(model(x), y).value()());
}

}  // namespace

template <class Model>
GptHeadStudy study_gpt_heads(Model& model, const text::Windows& windows, std::size_t sequences, std::uint64_t seed) {
    const nn::DecodingShape c = model.decoding();
    const std::size_t T = c.positions, N = sequences, H = c.heads, L = c.layers, D = c.width / H;
    Generator gen(seed);
    xt::xtensor<std::int64_t, 2> x, y;
    windows.batch(text::Split::val, N, T, gen, x, y);

    // Induction: random tokens r_0 .. r_{R-1} twice; query R + k (k >= 0) should attend to key k + 1.
    // Each token is the one at a random position of the val text: drawn as often as the text has
    // it (a uniform draw over a character vocabulary is mostly symbols the text hardly holds).
    const std::size_t R = T / 2, val_first = windows.tokens(text::Split::train), val_length = windows.tokens(text::Split::val);
    xt::xtensor<std::int64_t, 2> repeated = xt::xtensor<std::int64_t, 2>::from_shape({N, 2 * R});
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < R; ++k)
            windows.read(val_first + std::size_t(gen.uniform() * double(val_length)), 1,
                         [&](std::size_t, std::int64_t id) { repeated(n, k) = repeated(n, R + k) = id; });
    const auto text_weights = layer_weights(model, x);
    const auto repeat_weights = layer_weights(model, repeated);

    GptHeadStudy out;
    out.val_loss = val_loss(model, x, y);
    out.repeat_length = R;
    out.repeat_maps = xt::xtensor<double, 3>::from_shape({L * H, 2 * R, 2 * R});
    for (std::size_t l = 0; l < L; ++l) {
        const auto scores = score_heads(text_weights[l], true, 0);
        auto& proj = output_projection(model, l).value();
        for (std::size_t h = 0; h < H; ++h) {
            const auto& w = repeat_weights[l];
            const double previous = previous_token_score(text_weights[l], h), induction = induction_score(w, h, R);
            HeadReport r;
            r.layer = l, r.head = h, r.scores = scores[h];
            r.label = gpt_head_label(scores[h], previous, induction);
            r.previous_token = previous, r.induction = induction;
            auto columns = xt::view(proj, xt::all(), xt::range(h * D, h * D + D));  // the head's share of c_proj
            const xt::xtensor<float, 2> saved = columns;
            columns = xt::zeros<float>(saved.shape());
            r.ablation_loss = val_loss(model, x, y) - out.val_loss;
            columns = saved;
            out.heads.push_back(std::move(r));
            for (std::size_t i = 0; i < 2 * R; ++i)
                for (std::size_t j = 0; j < 2 * R; ++j) {
                    double mean = 0;
                    for (std::size_t n = 0; n < N; ++n) mean += w(n, h, i, j);
                    out.repeat_maps(l * H + h, i, j) = mean / double(N);
                }
        }
    }
    return out;
}

template GptHeadStudy study_gpt_heads(nn::GPT<float>&, const text::Windows&, std::size_t, std::uint64_t);
template GptHeadStudy study_gpt_heads(nn::Llama<float>&, const text::Windows&, std::size_t, std::uint64_t);

namespace {

template <class Loaded>
int loaded_heads(Loaded m, const std::string& checkpoint, const std::string& out_dir, int sequences, std::uint64_t seed,
                 const std::string& text_file) {
    const nn::DecodingShape c = m.model.decoding();
    if (!m.tokenizer)
        throw value_error(checkpoint + ": heads of an llm.c or llama2.c model need its text; use a checkpoint of `xgrad train`");
    const text::Corpus corpus = text_file.empty() ? gpt_task::default_corpus() : text::Corpus::map_file(text_file);
    const text::Windows windows(corpus, *m.tokenizer, 0.1);
    const GptHeadStudy study = study_gpt_heads(m.model, windows, std::size_t(sequences), seed);

    fmt::print("{}: {} {} layers, {} heads, width {}; {} val windows of {} tokens from {}\n", checkpoint,
               std::is_same_v<decltype(m.model), nn::Llama<float>> ? "Llama" : "GPT", c.layers, c.heads, c.width,
               sequences, c.positions, corpus.name());
    fmt::print("val loss {:.4f}\n\n", study.val_loss);
    fmt::print("{:>5} {:>4}  {:<27} {:>10} {:>9} {:>11} {:>10} {:>15}\n", "layer", "head", "label", "prev-token",
               "induction", "first-token", "uniformity", "ablation: loss");
    AttentionMaps labels;
    std::size_t previous_heads = 0, induction_heads = 0;
    for (const HeadReport& r : study.heads) {
        previous_heads += r.label == "previous token", induction_heads += r.label == "induction";
        fmt::print("{:>5} {:>4}  {:<27} {:>10.3f} {:>9.3f} {:>11.3f} {:>10.3f} {:>+15.4f}\n", r.layer, r.head, r.label,
                   *r.previous_token, *r.induction, r.scores.first_token_mass, r.scores.uniformity, *r.ablation_loss);
        labels.panel_titles.push_back(fmt::format("layer {} head {}: {}", r.layer, r.head, r.label));
    }
    fmt::print("\n{} previous-token head(s), {} induction head(s)\n", previous_heads, induction_heads);
    if (out_dir.empty()) return 0;
    const std::size_t R = study.repeat_length;
    for (std::size_t t = 0; t < 2 * R; ++t) labels.key_labels.push_back(fmt::format("{}{}", t < R ? "a" : "b", t % R));
    labels.query_labels = labels.key_labels;
    labels.title = fmt::format("mean attention on {} random sequences of {} tokens repeated twice (a = first copy, "
                               "b = second): induction heads attend from b_k to a_(k+1)", sequences, R);
    const auto png = attention_grid_png(study.repeat_maps, labels);
    std::filesystem::create_directories(out_dir);
    write_png(std::filesystem::path(out_dir) / "heads.png", png);
    fmt::print("wrote {}/heads.png\n", out_dir);
    return 0;
}

}  // namespace

int gpt_heads(const std::string& checkpoint, const std::string& out_dir, int sequences, std::uint64_t seed,
              const std::string& text_file) {
    if (llama_task::is_llama(checkpoint))
        return loaded_heads(llama_task::load_llama(checkpoint), checkpoint, out_dir, sequences, seed, text_file);
    return loaded_heads(gpt_task::load_model(checkpoint), checkpoint, out_dir, sequences, seed, text_file);
}

}  // namespace xgrad::cli
