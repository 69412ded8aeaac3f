// `xgrad gpt --from IN --to OUT`: one forward and backward of a GPT stored as nanoGPT's files (the
// folder format of study/gpt_files.hpp). Writes OUT/logits.npy (B, T, vocab_size), OUT/loss.npy ()
// (nanoGPT's mean cross-entropy) and OUT/grad.<name>.npy for every parameter (both tied names). Bad
// input: one line naming the file or field, exit status 2, nothing written. `--model DIR` takes the
// model from a GPT-2 folder in Hugging Face's layout instead; IN then needs idx.npy and targets.npy only.
#include <filesystem>
#include <map>
#include <string>

#include "commands/commands.hpp"
#include "study/gpt_files.hpp"
#include "xgrad/io/file.hpp"
#include "xgrad/io/npy.hpp"

namespace xgrad::cli {
namespace {

namespace fs = std::filesystem;

template <Real T>
std::map<std::string, io::NpyArray> forward_backward(const nn::GPT<T>& model, const GptFiles& f) {
    const Var<T, 3> logits = model(f.idx);
    const Var<T, 0> loss = nn::gpt_loss(logits, f.targets);
    backward(loss);
    std::map<std::string, io::NpyArray> files{{"logits", io::NpyArray::from(logits.value())},
                                              {"loss", io::NpyArray::from(loss.value())}};
    for_each_parameter_name(model, [&](const std::string& name, const auto& v) {
        files["grad." + name] = io::NpyArray::from(v.grad());
    });
    return files;
}

void run_gpt(const fs::path& in, const fs::path& out, const std::string& model_dir) {
    io::StagingDir::check_target(out);
    const GptFiles f = model_dir.empty() ? read_gpt_files(in) : read_gpt_files(in, model_dir);
    const auto files = std::visit([&](const auto& model) { return forward_backward(model, f); }, f.model);
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
            run_gpt(from, to, model);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
