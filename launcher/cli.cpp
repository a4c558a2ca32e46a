// Command-line parsing for train_gpt; bad usage is a UserError with one line.
#include "launcher/cli.h"

#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace trellis {

std::string usage() {
  return "usage: train_gpt CONFIG.toml [--set section.key=value]... [--dump-grads DIR] [--export-weights DIR]\n"
         "       train_gpt CONFIG.toml [--set section.key=value]... --eval\n"
         "       train_gpt CONFIG.toml [--set section.key=value]... --plan | --layouts [--world N] [--device-memory GIB]\n"
         "       train_gpt --config-doc\n"
         "\n"
         "  CONFIG.toml             the run's configuration (see docs/config.md)\n"
         "  --set section.key=value override one config key (repeatable; also --set=section.key=value)\n"
         "  --dump-grads DIR        write the gradients of the first step to DIR (new or empty) and exit\n"
         "  --export-weights DIR    after training, write the weights (model.json + params.f32) to DIR (new or empty)\n"
         "  --eval                  validate what the run would start from (checkpoint.resume's checkpoint, else\n"
         "                          model.init_from, else the initialization) once on log.val_batches global batches of\n"
         "                          the validation split, print the loss and perplexity, and exit: nothing is trained\n"
         "                          or saved (no checkpoint, metrics or TensorBoard file); a checkpoint is read as a\n"
         "                          resume reads it (on any layout, at its run's train.global_batch and precision)\n"
         "  --plan                  print each pipeline stage's memory per rank and the step's compute, and exit\n"
         "  --layouts               list every tensor x pipeline x data layout of the world for this config, each with\n"
         "                          its largest rank's memory and pipeline bubble at the same global batch, and exit\n"
         "  --world N               with --plan or --layouts: for N ranks (default: the ranks launched)\n"
         "  --device-memory GIB     with --plan or --layouts: say which layouts fit a device of GIB GiB (default: this\n"
         "                          machine's GPU's free memory, if it has one)\n"
         "  --config-doc            print the configuration reference (docs/config.md) and exit\n"
         "  --help                  print this help and exit\n"
         "\n"
         "Launch: train_gpt run.toml (one process), mpirun -np N train_gpt run.toml, srun train_gpt run.toml\n";
}

CliArgs parse_cli(int argc, char** argv) {
  CliArgs a;
  const std::string hint = " (see train_gpt --help)";
  // The value of an option given as "--opt value" or "--opt=value".
  auto value_of = [&](std::string_view opt, std::string_view arg, int& i) -> std::string {
    if (arg.size() > opt.size()) return std::string(arg.substr(opt.size() + 1));
    if (i + 1 >= argc) throw UserError(std::string(opt) + ": missing value" + hint);
    // "--dump-grads --set ..." names no directory: the next option is not a value.
    if (std::string_view(argv[i + 1]).substr(0, 2) == "--")
      throw UserError(std::string(opt) + ": missing value before " + argv[i + 1] + hint);
    return argv[++i];
  };
  auto is_opt = [](std::string_view arg, std::string_view opt) {
    return arg == opt || (arg.size() > opt.size() && arg.substr(0, opt.size()) == opt &&
                          arg[opt.size()] == '=');
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
    } else if (arg == "--config-doc") {
      a.print_config_doc = true;
    } else if (is_opt(arg, "--set")) {
      std::string item = value_of("--set", arg, i);
      if (item.find('=') == std::string::npos)
        throw UserError("--set " + item + ": expected section.key=value");
      a.overrides.push_back(std::move(item));
    } else if (is_opt(arg, "--dump-grads")) {
      a.dump_grads_dir = value_of("--dump-grads", arg, i);
      if (a.dump_grads_dir.empty()) throw UserError("--dump-grads: missing directory" + hint);
    } else if (is_opt(arg, "--export-weights")) {
      a.export_weights_dir = value_of("--export-weights", arg, i);
      if (a.export_weights_dir.empty()) throw UserError("--export-weights: missing directory" + hint);
    } else if (arg == "--eval") {
      a.eval_only = true;
    } else if (arg == "--plan") {
      a.plan = true;
    } else if (arg == "--layouts") {
      a.layouts = true;
    } else if (is_opt(arg, "--device-memory")) {
      const std::string g = value_of("--device-memory", arg, i);
      char* end = nullptr;
      const double gib = std::strtod(g.c_str(), &end);
      if (g.empty() || *end != '\0' || !(gib > 0 && gib <= 1 << 20))
        throw UserError("--device-memory " + g + ": expected GiB of device memory, a number above 0 (e.g. 80)" + hint);
      a.device_memory_gib = gib;
    } else if (is_opt(arg, "--world")) {
      const std::string n = value_of("--world", arg, i);
      char* end = nullptr;
      const long w = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || w < 1 || w > (1 << 20))
        throw UserError("--world " + n + ": expected a number of ranks from 1 to " + std::to_string(1 << 20) + hint);
      a.plan_world = int(w);
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UserError("unknown option " + std::string(arg) + hint);
    } else if (!a.config_path.empty()) {
      throw UserError("more than one config file: " + a.config_path + " and " + std::string(arg) + hint);
    } else {
      a.config_path = arg;
    }
  }
  if (!a.dump_grads_dir.empty() && !a.export_weights_dir.empty())
    throw UserError("--dump-grads writes the first step's gradients and exits without training; it does not go "
                    "with --export-weights" + hint);
  if (a.eval_only && (!a.dump_grads_dir.empty() || !a.export_weights_dir.empty() || a.plan || a.layouts))
    throw UserError("--eval validates the model once and exits without training; it does not go with --dump-grads, "
                    "--export-weights, --plan or --layouts" + hint);
  if (a.plan && a.layouts)
    throw UserError("--plan prints one layout, --layouts every layout of the world: give one of them" + hint);
  if (a.plan_world > 0 && !a.plan && !a.layouts) throw UserError("--world goes with --plan or --layouts" + hint);
  if (a.device_memory_gib > 0 && !a.plan && !a.layouts)
    throw UserError("--device-memory goes with --plan or --layouts" + hint);
  if (a.print_config_doc && !a.config_path.empty())
    throw UserError("--config-doc prints the configuration reference and takes no config file (" + a.config_path + ")" +
                    hint);
  if ((a.plan || a.layouts) && (!a.dump_grads_dir.empty() || !a.export_weights_dir.empty()))
    throw UserError(std::string(a.plan ? "--plan" : "--layouts") +
                    " prints a plan and exits without training; it does not go with --dump-grads or --export-weights" +
                    hint);
  if (a.config_path.empty() && !a.help && !a.print_config_doc)
    throw UserError("missing the config file: train_gpt CONFIG.toml [--set section.key=value]..." + hint);
  return a;
}

}  // namespace trellis
