// study/patch_study.hpp.
#include "study/patch_study.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/core.h>

#include "xgrad/core/error.hpp"

namespace xgrad::cli {

PatchRuns patch_runs(const text::Tokenizer& tok, std::size_t block_size, const PatchTexts& t) {
    const auto clean_ids = tok.encode(t.clean, "--clean-text"), corrupt_ids = tok.encode(t.corrupt, "--corrupt-text");
    if (clean_ids.size() != corrupt_ids.size())
        throw value_error(fmt::format("--corrupt-text: {} tokens, the clean text {}; the two runs need the same length",
                                      corrupt_ids.size(), clean_ids.size()));
    if (clean_ids.empty() || clean_ids.size() > block_size)
        throw value_error(fmt::format("--clean-text: {} tokens; between 1 and block_size {}", clean_ids.size(), block_size));
    const std::size_t T = clean_ids.size();
    PatchRuns r{patching::Ids({std::size_t(1), T}), patching::Ids({std::size_t(1), T}), {}, {}};
    std::copy(clean_ids.begin(), clean_ids.end(), r.clean.begin());
    std::copy(corrupt_ids.begin(), corrupt_ids.end(), r.corrupt.begin());
    if (t.correct.empty() != t.wrong.empty()) throw value_error("give --correct and --wrong together, or neither (the loss)");
    if (!t.correct.empty()) {
        const auto one = [&](const std::string& text, const char* option) {
            const auto ids = tok.encode(text, option);
            if (ids.size() != 1)
                throw value_error(fmt::format("{}: \"{}\" is {} tokens; the logit difference needs one", option, text, ids.size()));
            return ids[0];
        };
        r.metric.correct = {one(t.correct, "--correct")}, r.metric.wrong = {one(t.wrong, "--wrong")};
        r.metric_label = fmt::format("logit('{}') - logit('{}') at the last position", t.correct, t.wrong);
        return r;
    }
    // The loss of the clean text's next tokens, from position --loss-from on.
    if (t.loss_from + 1 >= T)
        throw value_error(fmt::format("--loss-from: {} leaves no next token of the {} of the clean text", t.loss_from, T));
    r.metric.kind = patching::Metric::Kind::loss;
    r.metric.targets = patching::Ids({std::size_t(1), T});
    for (std::size_t i = 0; i < T; ++i) r.metric.targets(0, i) = i >= t.loss_from && i + 1 < T ? clean_ids[i + 1] : -1;
    r.metric_label = fmt::format("loss of the clean text's next tokens from position {}", t.loss_from);
    return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
    const double n = double(a.size());
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
    for (std::size_t i = 0; i < a.size(); ++i)
        sab += (a[i] - ma) * (b[i] - mb), saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
    return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

namespace {
std::vector<double> ranks(const std::vector<double>& x) {
    std::vector<std::size_t> order(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (std::size_t i = 0; i < order.size();) {
        std::size_t j = i;
        while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
        for (std::size_t k = i; k <= j; ++k) r[order[k]] = (double(i) + double(j)) / 2;
        i = j + 1;
    }
    return r;
}
}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) { return pearson(ranks(a), ranks(b)); }

HeadEffects head_effects(const patching::Result& exact, const patching::Result& atp) {
    HeadEffects e;
    e.layers = exact.head.shape()[0], e.heads = exact.head.shape()[1];
    for (std::size_t l = 0; l < e.layers; ++l)
        for (std::size_t h = 0; h < e.heads; ++h)
            e.exact.push_back(exact.head(l, h) - exact.into), e.atp.push_back(atp.head(l, h));
    e.pearson = pearson(e.exact, e.atp), e.spearman = spearman(e.exact, e.atp);
    return e;
}

}  // namespace xgrad::cli
