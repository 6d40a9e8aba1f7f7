// The main of the isolation suites (isolation, limits, reaper): every test
// in them needs bwrap, root and cgroup v1. Where they are missing, the
// binary says why and exits with 77, which ctest reports as skipped
// (SKIP_RETURN_CODE in tests/CMakeLists.txt), never as passed. Listing the
// tests (catch_discover_tests at build time) works everywhere.

#define CATCH_CONFIG_RUNNER
#include "isolation_fixture.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  Catch::Session session;
  if (auto rc = session.applyCommandLine(argc, argv); rc != 0)
    return rc;
  auto& cfg = session.configData();
  bool listing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags ||
                 cfg.listReporters || cfg.showHelp;
  if (!listing)
    if (auto why = sv::test::isolation_unavailable(); !why.empty()) {
      std::fprintf(stderr, "SKIPPED: bwrap isolation unavailable: %s\n",
                   why.c_str());
      return sv::test::skip_return_code;
    }
  return session.run();
}
