// train_gpt CONFIG.toml [--set section.key=value]... : trains a GPT as the config says, the same
// way alone, under mpirun and under srun (rank, world and local rank come from MPI itself).
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "launcher/checkpointing.h"
#include "launcher/cli.h"
#include "launcher/model_files.h"
#include "launcher/layout_sweep.h"
#include "launcher/plan.h"
#include "launcher/train_config.h"
#include "launcher/trainer.h"

using namespace trellis;

namespace {

LaunchInfo init_mpi(int* argc, char*** argv) {
  TRELLIS_MPI_CHECK(MPI_Init(argc, argv));
  LaunchInfo l;
  TRELLIS_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &l.rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &l.world));
  MPI_Comm node;
  TRELLIS_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, l.rank, MPI_INFO_NULL, &node));
  TRELLIS_MPI_CHECK(MPI_Comm_rank(node, &l.local_rank));
  TRELLIS_MPI_CHECK(MPI_Comm_size(node, &l.local_size));
  TRELLIS_MPI_CHECK(MPI_Comm_free(&node));
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  set_process_identity(ProcessIdentity{l.rank, l.world, host});
  return l;
}

// Whether `message` names `key` ("section.name") as a whole, not as part of a longer name.
bool names_key(const std::string& message, const std::string& key) {
  const auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  for (size_t at = message.find(key); at != std::string::npos; at = message.find(key, at + 1)) {
    const size_t end = at + key.size();
    const bool starts = at == 0 || !(word(message[at - 1]) || message[at - 1] == '.');
    if (starts && (end == message.size() || !word(message[end]))) return true;
  }
  return false;
}

// An error message that names a key given with --set says so: the config file it names does not
// hold that value.
std::string with_set_note(const std::string& message, const std::vector<std::string>& overrides) {
  if (message.find("--set") != std::string::npos) return message;
  std::string from_set;
  for (const std::string& o : overrides) {
    std::string key = o.substr(0, o.find('='));
    key.erase(std::remove(key.begin(), key.end(), ' '), key.end());  // "--set 'a.b = 1'" names a.b
    key.erase(std::remove(key.begin(), key.end(), '\t'), key.end());
    if (!key.empty() && names_key(message, key)) from_set += (from_set.empty() ? "" : ", ") + o;
  }
  return from_set.empty() ? message : message + " (from --set " + from_set + ")";
}

// Prints a UserError's message as the run's one error line, after what stdout holds so far.
void print_error(const std::string& message, const std::vector<std::string>& overrides) {
  std::fflush(stdout);  // the error line after what was printed before it, also in a log file
  std::fprintf(stderr, "error: %s\n", with_set_note(message, overrides).c_str());
}

// Runs `step` on every rank; if it throws UserError on any rank, the lowest such rank prints its
// message and every rank returns false. Keeps ranks from hanging in a collective when only some
// of them found a problem (a file missing on one node, say).
bool agree(const LaunchInfo& l, const std::function<void()>& step, const std::vector<std::string>& overrides = {}) {
  std::string message;
  try {
    step();
  } catch (const UserError& e) {
    message = e.what();
  }
  int first_failed = message.empty() ? l.world : l.rank;
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &first_failed, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (first_failed == l.world) return true;
  if (first_failed == l.rank) print_error(message, overrides);
  return false;
}

// Whether `text` is the same on every rank (compares a hash of it).
bool same_on_every_rank(const std::string& text) {
  const uint64_t h = std::hash<std::string>{}(text);
  uint64_t lo = h, hi = h;
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD));
  TRELLIS_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD));
  return lo == hi;
}

// Every rank must run the same resolved config.
void check_same_config(const Config& cfg) {
  if (!same_on_every_rank(config_to_toml(cfg)))
    throw UserError(cfg.path + ": the resolved config differs between ranks (different files or --set values); "
                               "every rank must run the same config");
}

// Every rank must do the same thing: one rank planning or dumping while the others train would wait
// forever in the others' collectives. (The config is compared once it is read.)
void check_same_options(const CliArgs& a) {
  const std::string options = std::to_string(a.help) + "|" + std::to_string(a.print_config_doc) + "|" +
                              std::to_string(a.plan) + "|" + std::to_string(a.layouts) + "|" +
                              std::to_string(a.plan_world) + "|" + std::to_string(a.device_memory_gib) + "|" +
                              a.dump_grads_dir + "|" + a.export_weights_dir + "|" + std::to_string(a.eval_only);
  if (!same_on_every_rank(options))
    throw UserError("the command-line options (--plan, --layouts, --world, --device-memory, --dump-grads, "
                    "--export-weights, --eval, --help, --config-doc) differ between ranks; start every rank with the same "
                    "ones");
}

}  // namespace

int main(int argc, char** argv) {
  LaunchInfo launch = init_mpi(&argc, &argv);
  CliArgs args;
  Config cfg;
  bool ok = agree(launch, [&] { args = parse_cli(argc, argv); });
  ok = ok && agree(launch, [&] { check_same_options(args); });
  if (ok && args.help) {
    if (launch.rank == 0) std::printf("%s", usage().c_str());
  } else if (ok && args.print_config_doc) {
    if (launch.rank == 0) std::printf("%s", config_reference_markdown().c_str());
  } else if (ok && (args.plan || args.layouts)) {
    ok = agree(launch, [&] {
      cfg = load_config(args.config_path, args.overrides);
      const int world = args.plan_world > 0 ? args.plan_world : launch.world;
      if (launch.rank != 0) return;
      if (args.plan) print_plan(cfg, world, args.device_memory_gib);
      else print_layouts(cfg, world, args.device_memory_gib);
    }, args.overrides);
  } else if (ok) {
    // Every rank reads and checks its config before any other collective; all fail alike.
    ok = agree(launch, [&] {
      cfg = load_config(args.config_path, args.overrides);
      if (args.eval_only) cfg = evaluation_config(cfg);
      validate_for_world(cfg, launch.world);
      check_devices(cfg, launch);
      // Found now rather than after training: without a checkpoint the weights would be lost.
      if (!args.export_weights_dir.empty() && launch.rank == 0) {
        auto where = [](const std::string& d) {  // "a/b/" and "a/b" alike
          std::error_code ec;
          std::filesystem::path p = std::filesystem::weakly_canonical(d, ec).lexically_normal();
          return p.filename().empty() ? p.parent_path() : p;
        };
        if (!cfg.checkpoint.dir.empty() && where(args.export_weights_dir) == where(cfg.checkpoint.dir))
          throw UserError("--export-weights " + args.export_weights_dir +
                          ": is checkpoint.dir; the export goes into a directory of its own");
        check_export_outside_checkpoints("--export-weights", args.export_weights_dir);
        check_export_dir_free("--export-weights", args.export_weights_dir);
      }
      if (!args.dump_grads_dir.empty() && launch.rank == 0) check_export_dir_free("--dump-grads", args.dump_grads_dir);
    }, args.overrides);
    ok = ok && agree(launch, [&] { check_same_config(cfg); });
    if (ok && launch.rank == 0 && args.dump_grads_dir.empty())
      std::printf("# resolved config\n%s\n", config_to_toml(cfg).c_str());
    // From here on a UserError is met alike by every rank (it depends on shared state only).
    if (ok) {
      try {
        if (!args.dump_grads_dir.empty()) dump_gradients(cfg, launch, args.dump_grads_dir);
        else run_training(cfg, launch, RunOptions{args.export_weights_dir, args.eval_only});
      } catch (const UserError& e) {
        if (launch.rank == 0 && *e.what()) print_error(e.what(), args.overrides);  // empty: said by its rank
        ok = false;
      } catch (const std::exception& e) {
        TRELLIS_FATAL(std::string("unexpected exception: ") + e.what());
      }
    }
  }
  MPI_Finalize();
  return ok ? 0 : 1;
}
