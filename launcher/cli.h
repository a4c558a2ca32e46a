// Command-line parsing for train_gpt:
//   train_gpt CONFIG.toml [--set section.key=value]... [--dump-grads DIR] [--export-weights DIR] [--eval]
//             [--plan | --layouts] [--world N] [--device-memory GIB] [--config-doc] [--help]
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
  bool eval_only = false;              // validate what the run would start from, once, and exit
  bool plan = false;                   // print the layout's per-rank memory and compute, and exit
  bool layouts = false;                // print every layout of the world with its memory and bubble, and exit
  int plan_world = 0;                  // --plan's / --layouts' world size; 0 = this launch's
  double device_memory_gib = 0;        // --plan / --layouts: the device memory to fit in; 0 = this GPU's, if any
  bool help = false;
};

// Throws UserError (one line) on bad usage. With --help or --config-doc no config is required.
CliArgs parse_cli(int argc, char** argv);
// The --help text (several lines, ends with a newline).
std::string usage();

}  // namespace trellis
