// libxgrad's readers and writers of model files (npy, npz, safetensors, GPT-2 and Llama folders,
// BPE and SentencePiece tokenizers), compiled as one unit: they share nlohmann-json's code, which
// took three times the CPU compiled in each file. Each file also compiles alone (scripts/fuzz).
#include "json.cpp"
#include "npy.cpp"
#include "npz.cpp"
#include "safetensors.cpp"
#include "bpe.cpp"
#include "sentencepiece.cpp"
#include "gpt2_config.cpp"
#include "gpt_folder.cpp"
#include "llama_config_json.cpp"
#include "llama_folder.cpp"
