// The heads of a copy-task model (study/heads.hpp): each head's scores and label on held-out
// sequences (study/head_analysis.hpp), and its importance by ablation: the held-out loss and
// accuracy with the head's columns of out_proj.weight set to zero.
#include <xtensor/xmath.hpp>
#include <xtensor/xview.hpp>

#include "study/heads.hpp"

namespace xgrad::cli {
namespace {

struct Eval {
    double loss, accuracy;
};

Eval evaluate(const copy_task::Model<float>& model, const copy_task::Batch& batch) {
    NoGrad no_record;
    const auto logits = model(batch.tokens);
    return {double(cross_entropy(logits, batch.targets).value()()), copy_task::accuracy(model, batch)};
}

}  // namespace

CopyHeadStudy study_copy_heads(copy_task::Model<float>& model, std::size_t sequences, std::uint64_t seed) {
    const auto& options = model.options;
    Generator gen(seed);
    const auto batch = copy_task::make_batch(sequences, options.seq, options.vocab, gen);
    Var<float, 4> weights;  // (N, H, L, S)
    {
        NoGrad no_record;
        model(batch.tokens, &weights);
    }
    const auto scores = score_heads(weights.value(), options.causal, long(options.seq));
    const Eval full = evaluate(model, batch);
    CopyHeadStudy out;
    out.loss = full.loss, out.accuracy = full.accuracy;
    const std::size_t D = options.embed / options.heads;
    auto& out_weight = model.attn.out_proj.weight.value();
    for (std::size_t h = 0; h < options.heads; ++h) {
        auto columns = xt::view(out_weight, xt::all(), xt::range(h * D, h * D + D));
        const xt::xtensor<float, 2> saved = columns;
        columns = xt::zeros<float>(saved.shape());
        const Eval ablated = evaluate(model, batch);
        columns = saved;
        HeadReport& r = out.heads.emplace_back();
        r.head = h, r.scores = scores[h], r.label = scores[h].label;
        r.ablation_loss = ablated.loss - full.loss, r.ablation_accuracy = ablated.accuracy - full.accuracy;
    }
    out.mean_weights = xt::mean(xt::cast<double>(weights.value()), {0});
    return out;
}

}  // namespace xgrad::cli
