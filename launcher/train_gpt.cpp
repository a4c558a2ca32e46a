// train_gpt CONFIG.toml [--set section.key=value]... : trains a GPT as the config says, the same
// way alone, under mpirun and under srun (rank, world and local rank come from MPI itself).
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <exception>

#include "core/error.h"
#include "launcher/cli.h"
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
  TRELLIS_MPI_CHECK(MPI_Comm_free(&node));
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  set_process_identity(ProcessIdentity{l.rank, l.world, host});
  return l;
}

}  // namespace

int main(int argc, char** argv) {
  LaunchInfo launch = init_mpi(&argc, &argv);
  int status = 0;
  try {
    CliArgs args = parse_cli(argc, argv);
    if (args.help) {
      if (launch.rank == 0) std::printf("%s", usage().c_str());
    } else if (args.print_config_doc) {
      if (launch.rank == 0) std::printf("%s", config_reference_markdown().c_str());
    } else {
      // Every rank reads and validates the same file before any collective, so all fail alike.
      Config cfg = load_config(args.config_path, args.overrides);
      validate_for_world(cfg, launch.world);
      if (!args.dump_grads_dir.empty()) {
        dump_gradients(cfg, launch, args.dump_grads_dir);
      } else {
        if (launch.rank == 0) std::printf("# resolved config\n%s\n", config_to_toml(cfg).c_str());
        run_training(cfg, launch);
      }
    }
  } catch (const UserError& e) {
    if (launch.rank == 0) std::fprintf(stderr, "error: %s\n", e.what());
    status = 1;
  } catch (const std::exception& e) {
    TRELLIS_FATAL(std::string("unexpected exception: ") + e.what());
  }
  MPI_Finalize();
  return status;
}
