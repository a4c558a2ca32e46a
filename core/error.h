// Two error paths: UserError for bad input (one clear line, caught in main), and fatal() for
// internal failures, which prints "[rank r/N host] file:line what" and aborts every rank.
#pragma once
#include <stdexcept>
#include <string>

namespace trellis {

// A mistake in what the user gave us (config, files, command line). The message is the whole
// line the user sees, e.g. "config.toml: model.n_heads = 5 does not divide model.d_model = 64".
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// Who this process is, for error and log prefixes. Set once after MPI_Init.
struct ProcessIdentity {
  int rank = 0;
  int world = 1;
  std::string host = "localhost";
};
const ProcessIdentity& process_identity();
void set_process_identity(const ProcessIdentity& id);

// Prints "[rank r/N host] file:line what" to stderr and aborts every rank (MPI_Abort when MPI
// is up, otherwise exits with status 1).
[[noreturn]] void fatal(const char* file, int line, const std::string& what);
// The same without the source location, for a message that is the whole story (a collective timeout).
[[noreturn]] void abort_all(const std::string& what);

}  // namespace trellis

#define TRELLIS_FATAL(msg) ::trellis::fatal(__FILE__, __LINE__, (msg))
#define TRELLIS_CHECK(cond, msg)                                                  \
  do {                                                                            \
    if (!(cond)) ::trellis::fatal(__FILE__, __LINE__, std::string("check `" #cond "` failed: ") + (msg)); \
  } while (0)
#define TRELLIS_MPI_CHECK(call)                                                    \
  do {                                                                             \
    int trellis_rc_ = (call);                                                      \
    if (trellis_rc_ != 0) ::trellis::fatal(__FILE__, __LINE__, std::string(#call) + ": MPI error " + std::to_string(trellis_rc_)); \
  } while (0)
