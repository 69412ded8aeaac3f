// `xgrad attention --from IN --to OUT`: nn::MultiheadAttention forward + backward on a problem
// stored as .npy files (PyTorch's parameter names), or N Adam/AdamW steps with --adam-steps N.
// Bad input: one line on stderr naming the file or field, exit status 2, nothing written to OUT.
// The file handling lives in study/mha_files.hpp.
#include <optional>
#include <string>

#include "commands/commands.hpp"
#include "study/mha_files.hpp"

namespace xgrad::cli {

void setup_attention(CLI::App& cmd) {
    static std::string from, to;
    static int adam_steps = 0;
    static AttentionAdamOptions adam;
    static double weight_decay = 0;
    cmd.add_option("--from", from, "input directory: config.json, query/key/value/grad_output.npy, parameters")
        ->required();
    cmd.add_option("--to", to, "output directory (created; files are replaced)")->required();
    auto* steps = cmd.add_option("--adam-steps", adam_steps,
                                 "run N optimizer steps instead of one backward (default: one backward)")
                      ->check(between(1, 1000000000))
                      ->default_str("");
    cmd.add_option("--lr", adam.lr, "learning rate")->needs(steps);
    cmd.add_option("--beta1", adam.beta1, "Adam beta1")->needs(steps);
    cmd.add_option("--beta2", adam.beta2, "Adam beta2")->needs(steps);
    cmd.add_option("--eps", adam.eps, "Adam eps")->needs(steps);
    auto* wd = cmd.add_option("--weight-decay", weight_decay, "weight decay")
                   ->needs(steps)
                   ->default_str("0 for Adam, 0.01 for AdamW");
    cmd.add_flag("--amsgrad", adam.amsgrad, "use the AMSGrad variant")->needs(steps);
    cmd.add_flag("--adamw", adam.adamw, "decoupled weight decay (AdamW)")->needs(steps);
    cmd.callback([steps, wd] {
        const bool train = steps->count() > 0;
        if (wd->count() > 0) adam.weight_decay = weight_decay;
        adam.steps = adam_steps;
        selected_action() = [train] {  // errors: one line and status 2, from main
            run_attention(from, to, train ? std::optional(adam) : std::nullopt);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
