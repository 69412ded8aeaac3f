// `xgrad gpt --from IN --to OUT`: one forward and backward of a GPT stored as nanoGPT's files (the
// folder format of study/gpt_files.hpp); `xgrad llama --from IN --to OUT` the same of a Llama stored
// as llama2.c's (study/llama_files.hpp). Writes OUT/logits.npy (B, T, vocab_size), OUT/loss.npy ()
// (the mean cross-entropy, target -1 ignored) and OUT/grad.<name>.npy for every parameter (both
// tied names). Bad input: one line naming the file or field, exit status 2, nothing written. `xgrad
// gpt --model DIR` takes the model from a GPT-2 folder in Hugging Face's layout instead; IN then
// needs idx.npy and targets.npy only.
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "commands/commands.hpp"
#include "study/gpt_files.hpp"
#include "study/llama_files.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"

namespace xgrad::cli {
namespace {

namespace fs = std::filesystem;

template <class Model>
std::map<std::string, io::NpyArray> forward_backward(const Model& model, const xt::xtensor<std::int64_t, 2>& idx,
                                                     const xt::xtensor<std::int64_t, 2>& targets) {
    using T = typename Model::value_type;
    const Var<T, 3> logits = model(idx);
    const Var<T, 0> loss = nn::gpt_loss(logits, targets);  // nanoGPT's and model.py's loss alike
    backward(loss);
    std::map<std::string, io::NpyArray> files{{"logits", io::NpyArray::from(logits.value())},
                                              {"loss", io::NpyArray::from(loss.value())}};
    for_each_parameter_name(model, [&](const std::string& name, const auto& v) {
        files["grad." + name] = io::NpyArray::from(v.grad());
    });
    return files;
}

// read() gives the model (a variant over float and double) and its idx and targets
template <class Read>
void run(const fs::path& out, const Read& read) {
    io::StagingDir::check_target(out);
    const auto f = read();
    const auto files = std::visit([&](const auto& model) { return forward_backward(model, f.idx, f.targets); }, f.model);
    io::StagingDir stage(out);
    for (const auto& [name, a] : files) io::write_npy(stage.file(name + ".npy"), a);
    stage.commit();
}

}  // namespace

void setup_gpt(CLI::App& cmd) {
    static std::string from, to, model;
    cmd.add_option("--from", from, "input directory: config.json, the parameters under nanoGPT's names, idx.npy and "
                                   "targets.npy")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    cmd.add_option("--model", model, "a GPT-2 folder in Hugging Face's layout (config.json, model.safetensors, vocab.json, "
                                     "merges.txt): the model; --from then holds idx.npy and targets.npy only (default: the model from --from)")
        ->check(CLI::ExistingDirectory);
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            run(to, [&] { return model.empty() ? read_gpt_files(from) : read_gpt_files(from, model); });
            return 0;
        };
    });
}

void setup_llama(CLI::App& cmd) {
    static std::string from, to;
    cmd.add_option("--from", from, "input directory: config.json (llama2.c's ModelArgs), the parameters under model.py's "
                                   "names, idx.npy and targets.npy")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            run(to, [&] { return read_llama_files(from); });
            return 0;
        };
    });
}

}  // namespace xgrad::cli
