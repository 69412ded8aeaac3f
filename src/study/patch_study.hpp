// What `xgrad patch --clean-text/--corrupt-text` and `xgrad explore --corrupt-text` share: the clean
// and corrupted runs of two texts under a model's tokenizer, their metric, and exact patching beside
// AtP per head with the two correlations (commands/patch.cpp, study/explore.cpp).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "xgrad/inspect/patching.hpp"
#include "xgrad/text/tokenizer.hpp"

namespace xgrad::cli {

// The two texts and the metric's options, as typed.
struct PatchTexts {
    std::string clean, corrupt;
    std::string correct, wrong;  // one token each: the logit difference; both empty: the loss
    std::size_t loss_from = 0;   // the loss counts the clean text's next tokens from this position on
};

// The runs (1, T) and the metric, checked: the same number of tokens, 1..block_size of them, one
// token each for --correct and --wrong, a next token past --loss-from. value_error naming the option.
struct PatchRuns {
    patching::Ids clean, corrupt;
    patching::Metric metric;
    std::string metric_label;  // "logit(' Mary') - logit(' John') at the last position", "loss from position 4"
};
PatchRuns patch_runs(const text::Tokenizer& tokenizer, std::size_t block_size, const PatchTexts& texts);

// Pearson's correlation of a and b; Spearman's is Pearson's of their ranks, ties averaged. 0 when
// either is constant.
double pearson(const std::vector<double>& a, const std::vector<double>& b);
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// Patching each head's z (every position) from the clean run into the corrupted one: the exact
// effect (patched − corrupted metric) and AtP's estimate of it, row-major (layer, head).
struct HeadEffects {
    std::size_t layers = 0, heads = 0;
    std::vector<double> exact, atp;
    double pearson = 0, spearman = 0;
};
HeadEffects head_effects(const patching::Result& exact, const patching::Result& atp);

}  // namespace xgrad::cli
