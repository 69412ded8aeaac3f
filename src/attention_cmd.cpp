// `xgrad attention --from IN --to OUT`: nn::MultiheadAttention forward + backward on a problem
// stored as .npy files (PyTorch's parameter names), or N Adam/AdamW steps with --adam-steps N.
// Bad input: one line on stderr naming the file or field, exit status 2, nothing written to OUT.
// The file handling lives in xgrad/io/attention_tool.hpp.
#include <optional>
#include <string>

#include "commands.hpp"
#include "xgrad/io/attention_tool.hpp"

namespace xgrad::cli {

void add_attention_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("attention", "run MultiheadAttention forward/backward (or Adam steps) on .npy files");
    static std::string from, to;
    static int adam_steps = 0;
    static io::AttentionAdamOptions adam;
    static double weight_decay = 0;
    cmd->add_option("--from", from, "input directory: config.json, query/key/value/grad_output.npy, parameters")
        ->required();
    cmd->add_option("--to", to, "output directory (created; files are replaced)")->required();
    auto* steps = cmd->add_option("--adam-steps", adam_steps, "run N optimizer steps instead of one backward")
                      ->check(CLI::Range(1, 1000000000));
    cmd->add_option("--lr", adam.lr, "learning rate")->needs(steps);
    cmd->add_option("--beta1", adam.beta1, "Adam beta1")->needs(steps);
    cmd->add_option("--beta2", adam.beta2, "Adam beta2")->needs(steps);
    cmd->add_option("--eps", adam.eps, "Adam eps")->needs(steps);
    auto* wd = cmd->add_option("--weight-decay", weight_decay, "weight decay (default 0 for Adam, 0.01 for AdamW)")
                   ->needs(steps);
    cmd->add_flag("--amsgrad", adam.amsgrad, "use the AMSGrad variant")->needs(steps);
    cmd->add_flag("--adamw", adam.adamw, "decoupled weight decay (AdamW)")->needs(steps);
    cmd->callback([steps, wd] {
        const bool train = steps->count() > 0;
        if (wd->count() > 0) adam.weight_decay = weight_decay;
        adam.steps = adam_steps;
        selected_action() = [train] {  // errors: one line and status 2, from main
            io::run_attention(from, to, train ? std::optional(adam) : std::nullopt);
            return 0;
        };
    });
}

}  // namespace xgrad::cli
