// `xgrad explore`: one forward and backward of a model on one input, every attention's maps and
// gradients collected for an interactive page (docs/explore.md). The numbers are the tool's own:
// the tape's values and gradients, the same that `xgrad inspect --dump` writes; the page computes
// none of them.
//
//   study/explore.hpp          what the page shows (ExploreData) and the entry points
//   study/explore_collect.hpp  the attention sites of a recorded tape and their gradients, the
//                              losses' driver
//   study/explore.cpp          the checkpoints it explores: `train gpt`, `train copy`, `train sort`
//   study/explore_folders.cpp  the folders: `xgrad attention`, `xgrad transformer`, `xgrad gpt`
//   study/explore_page.cpp     ExploreData as one self-contained HTML file (study/explore_page/)
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "study/head_analysis.hpp"
#include "study/patch_study.hpp"

namespace xgrad::cli {

// One attention of the model (a layer's self- or cross-attention), for the one sequence explored.
// Arrays are row-major; H heads, L queries, S keys.
struct ExploreSite {
    std::string name;                      // its module path on the tape ("transformer.h.0")
    std::size_t heads = 0, queries = 0, keys = 0, head_dim = 0;
    long query_input = 0, key_input = 0;   // the ExploreData::inputs its queries and keys are (-1: none)
    std::vector<double> weights;           // P (H, L, S)
    std::vector<std::uint8_t> masked;      // (H, L, S): 1 where the score is -inf (the key is ignored)
    std::vector<HeadReport> head_reports;  // `xgrad heads`' rows for this layer, when it has them
};

// What one loss's backward leaves in one site.
struct ExploreSiteGrads {
    std::vector<double> dweights, dscores;  // dL/dP, dL/dS (H, L, S)
    std::vector<double> dq;                 // ‖dL/dQ‖ per head and query (H, L)
    std::vector<double> dk, dv;             // ‖dL/dK‖, ‖dL/dV‖ per head and key (H, S)
    std::vector<double> head_input;         // ‖dX_h‖ (H): the gradient that reaches the attention's
                                            // inputs through head h (empty: not a Linear projection)
};

// One of the losses the page can pick: the whole loss or one position's.
struct ExploreChoice {
    std::string label;
    long position = -1;                  // -1: the whole loss
    double loss = 0;
    std::vector<std::vector<double>> saliency;  // ‖dL/dx_t‖ per token of each input (empty: not known)
    std::vector<ExploreSiteGrads> sites;
};

// A sequence the model reads: its name and a label per token ("" where there is no text to show:
// the page numbers the tokens).
struct ExploreInput {
    std::string name;
    std::vector<std::string> tokens;
};

// A clean/corrupted pair of a decoder's inputs (`--corrupt-text`): patching each head's z from the clean
// run into the corrupted one, exactly and by AtP, and the logit lens of both runs
// (inspect/patching.hpp, inspect/attribution.hpp; the numbers `xgrad patch` writes).
struct ExplorePatching {
    std::string metric;                          // what the metric measures
    double clean_metric = 0, corrupt_metric = 0;
    std::vector<std::string> clean_tokens, corrupt_tokens;
    HeadEffects heads;                           // (L, H) exact effect and AtP estimate, correlations
    std::vector<double> lens_clean, lens_corrupt;  // (L + 1): the metric from each resid_pre and the final residual
};

struct ExploreData {
    std::string title, description, dtype;  // dtype: "float32" or "float64", the model's
    std::vector<ExploreInput> inputs;       // a GPT's tokens; an encoder-decoder's source and target; ...
    std::size_t loss_input = 0;             // the input whose positions the per-position losses are
    std::vector<ExploreSite> sites;
    std::vector<ExploreChoice> choices;
    std::string heads_note;                 // where the head reports come from, or why there are none
    std::optional<ExplorePatching> patching;
};

struct ExploreOptions {
    std::filesystem::path source;      // a checkpoint (.npz, .bin) or a folder
    bool gpt_folder = false;           // source is a model folder in Hugging Face's layout (--model): a Llama's, else GPT-2's
    std::string text;                  // a GPT's input text (default: held-out text)
    PatchTexts patch;                  // a GPT's corrupted text and metric (--corrupt-text; clean: text)
    std::vector<std::int64_t> tokens;  // a copy-task model's input (default: a held-out sequence)
    std::string corpus;                // a GPT's text file for the default input and head reports
    std::size_t length = 32;           // tokens of held-out text for a GPT
    std::size_t positions = 32;        // per-position losses offered (evenly spaced, the last included)
    std::size_t sequence = 0;          // which sequence of a batched folder input
    int head_sequences = 64;           // sequences for the head reports (0: none)
    std::uint64_t seed = 12345;

    // The source's last part for titles: "checkpoint.npz", or "gpt2" for "models/gpt2/".
    std::string source_name() const {
        const std::filesystem::path p = source.lexically_normal();  // "gpt2/" keeps its slash: no filename
        return (p.has_filename() ? p : p.parent_path()).filename().string();
    }
};

// Runs the model named by o.source (see explore.cpp); io_error / value_error / shape_error naming
// the file or option for bad input.
ExploreData explore(const ExploreOptions& o);

// Writes the page: one HTML file, no request outside it (study/explore_page.cpp). Returns its size.
std::size_t write_explore_page(const ExploreData& data, const std::filesystem::path& out);

}  // namespace xgrad::cli
