// The file-level driver behind `xgrad attention` (and the input of `xgrad inspect`): reads an
// nn::MultiheadAttention problem from a folder of .npy files and a config.json, runs forward +
// backward (or N Adam/AdamW steps) and writes the results with PyTorch's names. Everything is read
// and validated before anything is computed; the results go to an io::StagingDir, so bad input (an
// io_error naming the file or field) leaves OUT untouched.
//
// IN:  config.json, query.npy, key.npy, value.npy, grad_output.npy, <param>.npy for every parameter
//      the config implies (in_proj_weight, out_proj.weight, ...), optional key_padding_mask.npy and
//      attn_mask.npy (bool or float). Float inputs are all float32 or all float64; that is the dtype
//      of the run.
// OUT: output.npy, attn_weights.npy (need_weights), grad.query.npy, grad.key.npy, grad.value.npy,
//      grad.<param>.npy — or, with Adam steps, loss.npy (float64, one per step) and <param>.npy.
#pragma once
#include <cstddef>
#include <filesystem>
#include <optional>
#include <variant>

#include "study/json_config.hpp"
#include "xgrad/nn/multihead_attention.hpp"

namespace xgrad::cli {

struct AttentionAdamOptions {
    int steps = 1;
    double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
    std::optional<double> weight_decay;  // default: 0 for Adam, 1e-2 for AdamW (torch's defaults)
    bool amsgrad = false;
    bool adamw = false;
};

// One attention problem read from IN and checked: the module with its parameters, the inputs,
// the forward options (masks) and the output gradient. T and N come from query.npy.
template <Real T, std::size_t N>
struct AttentionProblem {
    AttentionConfig config;
    nn::MultiheadAttention<T> mha;  // eval mode
    xt::xtensor<T, N> query, key, value, grad_output;
    nn::MhaForwardOptions<T> forward_options;
};

using AnyAttentionProblem = std::variant<AttentionProblem<float, 2>, AttentionProblem<float, 3>,
                                         AttentionProblem<double, 2>, AttentionProblem<double, 3>>;

// Reads and checks the attention problem in folder `in` (see the top of this file). Bad input
// throws io_error (naming the file or field), value_error or shape_error.
AnyAttentionProblem load_attention_problem(const std::filesystem::path& in);

// Runs one attention problem from folder `in` into folder `out` (see the top of this file).
// Throws io_error (bad files or config), value_error or shape_error; nothing is written then.
void run_attention(const std::filesystem::path& in, const std::filesystem::path& out,
                   const std::optional<AttentionAdamOptions>& adam = std::nullopt);

}  // namespace xgrad::cli
