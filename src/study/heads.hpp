// What `xgrad heads` measures of every attention head of a trained model, as data: the command
// prints it and draws it (commands/heads.cpp), `xgrad explore` shows it beside each head's maps.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include <xtensor/xtensor.hpp>

#include "study/head_analysis.hpp"
#include "tasks/copy.hpp"
#include "xgrad/nn/gpt.hpp"
#include "xgrad/text/corpus.hpp"

namespace xgrad::cli {

// A GPT's heads on `sequences` val windows of block_size tokens (study/gpt_heads.cpp). The ablation
// zeroes each head's columns of c_proj in turn and puts them back.
struct GptHeadStudy {
    double val_loss = 0;
    std::vector<HeadReport> heads;        // layer by layer, head by head
    std::size_t repeat_length = 0;        // R: the induction test's random tokens, each sequence R twice
    xt::xtensor<double, 3> repeat_maps;   // (n_layer·n_head, 2R, 2R): mean attention on those sequences
};
template <class Model>
GptHeadStudy study_gpt_heads(Model& model, const text::Windows& windows, std::size_t sequences,
                             std::uint64_t seed);

// A copy-task model's heads on `sequences` held-out sequences (study/copy_heads.cpp), ablated the same
// way through out_proj.
struct CopyHeadStudy {
    double loss = 0, accuracy = 0;
    std::vector<HeadReport> heads;
    xt::xtensor<double, 3> mean_weights;  // (heads, 2n, 2n)
};
CopyHeadStudy study_copy_heads(copy_task::Model<float>& model, std::size_t sequences, std::uint64_t seed);

}  // namespace xgrad::cli
