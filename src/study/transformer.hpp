// The file-level driver behind `xgrad transformer`: one forward and backward of a Transformer
// module (nn/transformer.hpp) given as files, PyTorch's names throughout. Everything is read and
// checked before anything is computed; results go through an io::StagingDir, so bad input (an
// io_error naming the file or field) leaves OUT untouched.
//
// IN/config.json: {"module": "encoder_layer" | "decoder_layer" | "encoder" | "decoder" | "transformer",
//   "d_model", "nhead", "dim_feedforward", "activation": "relu" | "gelu", "layer_norm_eps",
//   "batch_first", "norm_first"} + "num_layers" and "final_norm" (encoder, decoder),
//   "num_encoder_layers" and "num_decoder_layers" (transformer), optional "pos_embed" (not for
//   transformer) and "return_intermediate" (decoder with a final norm). Dropout is 0.
// IN/<name>.npy: every parameter under its state-dict name for that module; src (encoder_layer,
//   encoder, transformer), tgt (decoder_layer, decoder, transformer), memory (decoder_layer,
//   decoder), pos and query_pos (pos_embed), optional masks src_mask, src_key_padding_mask,
//   tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask (bool: true = ignore, or
//   float: added), grad_output (the output's shape). float32 or float64, from src.npy / tgt.npy.
// OUT: output.npy, grad.<input>.npy for every input array, grad.<name>.npy for every parameter.
#pragma once
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>

#include "study/npy_inputs.hpp"
#include "xgrad/io/npy.hpp"
#include "xgrad/nn/transformer_layers.hpp"

namespace xgrad::cli {

struct TransformerConfig {
    std::string module;  // encoder_layer, decoder_layer, encoder, decoder, transformer
    nn::TransformerLayerOptions layer;
    std::size_t num_layers = 0, num_encoder_layers = 0, num_decoder_layers = 0;
    bool final_norm = false, pos_embed = false, return_intermediate = false;
};

// Parses config.json text (see above); `source` names it in errors. Unknown, missing, mistyped or
// inconsistent fields are io_errors naming the field.
TransformerConfig parse_transformer_config(const std::string& text, const std::string& source);

// The results by OUT file stem ("output", "grad.src", "grad.linear1.weight", ...) and a one-line
// description of the run.
struct TransformerResults {
    std::map<std::string, io::NpyArray> files;
    std::string description;
    double loss = 0;  // Σ output ⊙ the gradient the backward started from
};

// The config of the problem in folder `in` (what parse_transformer_config reads from its config.json).
TransformerConfig read_transformer_config(const std::filesystem::path& in);

// Reads and checks the problem in folder `in`, then runs one forward and backward on the current
// tape (inputs, parameters and the output are named nodes, for xgrad inspect). Bad input throws
// io_error (naming the file or field), value_error or shape_error before anything is computed.
// `keep`: the backward starts from grad_output's row of one query only (`xgrad explore`).
TransformerResults compute_transformer(const std::filesystem::path& in, const OutputRow& keep = {});

// Whether `in` holds a Transformer problem: its config.json has a "module" field.
bool is_transformer_folder(const std::filesystem::path& in);

// Runs the problem in folder `in` into folder `out`. Throws as compute_transformer, or io_error
// when OUT cannot be made; nothing is written then.
void run_transformer(const std::filesystem::path& in, const std::filesystem::path& out);

}  // namespace xgrad::cli
