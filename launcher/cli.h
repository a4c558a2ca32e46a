// Command-line parsing for train_gpt:
//   train_gpt CONFIG.toml [--set section.key=value]... [--dump-grads DIR] [--export-weights DIR]
//             [--plan [--world N]] [--config-doc] [--help]
#pragma once
#include <string>
#include <vector>

namespace trellis {

struct CliArgs {
  std::string config_path;
  std::vector<std::string> overrides;  // "section.key=value", in command-line order
  bool print_config_doc = false;       // print docs/config.md and exit
  std::string dump_grads_dir;          // write gradients after the first step here; empty = off
  std::string export_weights_dir;      // write the final weights here; empty = off
  bool plan = false;                   // print the layout's per-rank memory and compute, and exit
  int plan_world = 0;                  // --plan's world size; 0 = this launch's
  bool help = false;
};

// Throws UserError (one line) on bad usage. With --help or --config-doc no config is required.
CliArgs parse_cli(int argc, char** argv);
// The --help text (several lines, ends with a newline).
std::string usage();

}  // namespace trellis
