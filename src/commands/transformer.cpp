// `xgrad transformer --from IN --to OUT`: one forward and backward of a Transformer module
// (encoder_layer, decoder_layer, encoder, decoder, transformer) stored as .npy files under
// PyTorch's names. Bad input: one line on stderr naming the file or field, exit status 2, nothing
// written to OUT. The file handling lives in study/transformer.hpp.
#include <string>

#include "commands/commands.hpp"
#include "study/transformer.hpp"

namespace xgrad::cli {

void setup_transformer(CLI::App& cmd) {
    static std::string from, to;
    cmd.add_option("--from", from, "input directory: config.json, the inputs, masks, grad_output and parameters (.npy)")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    cmd.callback([] {
        selected_action() = [] {  // errors: one line and status 2, from main
            run_transformer(from, to);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
