// PNG pictures of the command line tool, drawn with cairo (Debian's libcairo2; text in DejaVu Sans).
//
//   auto png = loss_chart_png(curve);                 // training loss and held-out accuracy over steps
//   auto png = attention_grid_png(weights, maps);     // one heatmap per head, in a grid
//   write_png("out/loss.png", png);                   // atomically, as every file of the tool
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <xtensor/xtensor.hpp>

namespace xgrad::cli {

struct LossCurve {
    std::vector<double> steps, loss;               // one point per training step
    std::vector<double> eval_steps, accuracy;      // the held-out evaluations
    std::string title;
    std::string accuracy_name = "held-out token accuracy";  // the right axis and the legend
    bool score_is_loss = false;  // the evaluations are a loss (a language model's val loss): left axis
};

// A line chart: loss (raw, and its moving average) on the left axis, accuracy in [0, 1] on the right
// (or, with score_is_loss, the held-out loss on the left axis too).
std::vector<unsigned char> loss_chart_png(const LossCurve& curve);

struct AttentionMaps {
    std::vector<std::string> panel_titles;          // one per head ("head 0", "head 2: offset -8")
    std::vector<std::string> query_labels, key_labels;  // one per row / column (tokens); may be empty
    std::string title;
    // The colour scale from low to high, its bar's label, and the axes' (other maps than weights:
    // `xgrad patch`'s effects per layer and head).
    double low = 0, high = 1;
    std::string scale = "weight", rows = "query", columns = "key";
};

// weights (H, L, S), each row a distribution over the S keys: H heatmaps (rows = queries, columns =
// keys) in a grid of at most 4 columns, a shared colour scale (0 to 1 unless maps says) with its bar.
std::vector<unsigned char> attention_grid_png(const xt::xtensor<double, 3>& weights, const AttentionMaps& maps);

// Writes an encoded PNG through a temporary file and a rename.
void write_png(const std::filesystem::path& path, const std::vector<unsigned char>& png);

}  // namespace xgrad::cli
