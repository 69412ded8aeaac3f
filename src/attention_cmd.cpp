// (being written)
#include "commands.hpp"
namespace xgrad::cli {
void add_attention_command(CLI::App&) {}
}  // namespace xgrad::cli
