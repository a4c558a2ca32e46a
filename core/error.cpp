// The abort path shared by every rank.
#include "core/error.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace trellis {

namespace {
ProcessIdentity& identity_storage() {
  static ProcessIdentity id;
  return id;
}
}  // namespace

const ProcessIdentity& process_identity() { return identity_storage(); }
void set_process_identity(const ProcessIdentity& id) { identity_storage() = id; }

void fatal(const char* file, int line, const std::string& what) {
  abort_all(std::string(file) + ":" + std::to_string(line) + " " + what);
}

void abort_all(const std::string& what) {
  const ProcessIdentity& id = process_identity();
  std::fprintf(stderr, "[rank %d/%d %s] %s\n", id.rank, id.world, id.host.c_str(), what.c_str());
  std::fflush(stderr);
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down && id.world > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

}  // namespace trellis
