// Helpers shared by the unit tests: a per-test temporary directory and "the message of the
// UserError this throws".
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "core/error.h"

namespace trellis::testing {

// A fresh directory named after the test (and the process), removed at the end.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& prefix = "trellis_test") {
    path = std::filesystem::temp_directory_path() /
           (prefix + "_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// The what() of the UserError f throws, or "(no error)".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace trellis::testing
