// The driver behind `xgrad inspect --from IN`: one MultiheadAttention forward and backward on the
// problem in IN (the folder format of `xgrad attention`, study/mha_files.hpp), printed as a tape
// listing; optionally the graph as Graphviz dot and every intermediate value and gradient as .npy
// files. A folder in the format of `xgrad transformer` (config.json with a "module" field,
// study/transformer.hpp) runs that module's forward and backward instead: its inputs, parameters
// (by state-dict name) and every attention's nodes are listed.
//
// When key.npy and value.npy hold the same array as query.npy, the three are passed as one Var x
// (self-attention, as in a training loop), so the tape shows the packed in-projection; x's
// gradient is then the sum of the query, key and value gradients.
//
// --dump DIR gets <leaf>.npy and <leaf>.grad.npy for the inputs and parameters, NN-<name>.npy and
// NN-<name>.grad.npy for the op at tape position NN (unnamed ops: NN-<op>.npy), and
// NN-weights.scores(.grad).npy for the scores inside attention_weights. A .grad.npy is written only
// where a gradient arrived. Files are written to an io::StagingDir committed at the end.
#pragma once
#include <filesystem>
#include <optional>
#include <ostream>

namespace xgrad::cli {

struct InspectOptions {
    std::optional<std::filesystem::path> dot;   // write the graph here
    std::optional<std::filesystem::path> dump;  // write every value and gradient into this folder
};

// Prints the tape of one forward and backward of the problem in `in` to `os`, and writes the
// optional dot file and dump folder. Bad input throws (io_error naming the file) before anything
// is printed or written.
void run_inspect(const std::filesystem::path& in, std::ostream& os, const InspectOptions& opt = {});

}  // namespace xgrad::cli
