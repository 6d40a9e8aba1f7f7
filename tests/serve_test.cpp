// sv-serve's parts without sockets: bearer tokens (constant-time compare,
// the file format, reload keeping the old set on failure) and the
// Prometheus text of its metrics.

#include "apps/sv_serve/metrics.hpp"
#include "apps/sv_serve/tokens.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace sv;
using namespace sv::serve;

namespace {

struct token_file {
  std::string path;
  token_file() {
    char tmpl[] = "/tmp/sv-serve-tokens-XXXXXX";
    auto fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
  }
  ~token_file() { std::remove(path.c_str()); }
  void write(const std::string& text) const {
    std::ofstream out{path, std::ios::trunc};
    out << text;
  }
};

} // namespace

TEST_CASE("token equality looks at lengths and every byte") {
  CHECK(token_set::equal("abc", "abc"));
  CHECK_FALSE(token_set::equal("abc", "abd"));
  CHECK_FALSE(token_set::equal("abc", "abcd"));
  CHECK_FALSE(token_set::equal("", "a"));
  CHECK(token_set::equal("", ""));
}

TEST_CASE("without a token file every request is accepted") {
  token_set tokens;
  CHECK_FALSE(tokens.required());
  CHECK(tokens.accepts(""));
}

TEST_CASE("tokens are one a line, blank lines and spaces ignored") {
  token_file file;
  file.write("alpha\n\n  beta \r\n");
  token_set tokens{file.path};
  CHECK(tokens.required());
  CHECK(tokens.accepts("Bearer alpha"));
  CHECK(tokens.accepts("Bearer beta"));
  CHECK_FALSE(tokens.accepts("Bearer gamma"));
  CHECK_FALSE(tokens.accepts("alpha"));
  CHECK_FALSE(tokens.accepts("Basic alpha"));
  CHECK_FALSE(tokens.accepts("Bearer "));
  CHECK_FALSE(tokens.accepts(""));
}

TEST_CASE("a reload replaces the tokens, and a failed one keeps them") {
  token_file file;
  file.write("old\n");
  token_set tokens{file.path};
  file.write("new\n");
  CHECK(tokens.reload().empty());
  CHECK(tokens.accepts("Bearer new"));
  CHECK_FALSE(tokens.accepts("Bearer old"));
  file.write("\n\n");
  CHECK(tokens.reload().find("no token") != std::string::npos);
  CHECK(tokens.accepts("Bearer new"));
}

TEST_CASE("a token file that cannot be read is an error at start") {
  CHECK_THROWS_AS(token_set{"/nonexistent/sv-serve-tokens"},
                  std::runtime_error);
}

TEST_CASE("metrics render as Prometheus text with the outcome labels") {
  metrics m;
  m.count_http(200);
  m.count_http(200);
  m.count_http(404);
  m.started();
  m.started();
  verification_outcome ok;
  ok.ok = true;
  ok.timings.create = 5;
  ok.timings.total = 20;
  m.finished(ok);
  verification_outcome bad;
  bad.failure.kind = failure_kind::verifier_error;
  bad.failure.state = verification_state::exec;
  bad.failure.cause = failure_cause::timeout;
  bad.timings.total = 2000;
  m.finished(bad);
  m.started();
  m.cancelled(1);
  supervisor_stats stats;
  stats.sandboxes_created = 3;
  stats.sandboxes_stopped = 2;
  stats.provider_restarts = 1;
  auto text = m.render(stats);
  std::regex sample{R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? \S+$)"};
  std::istringstream lines{text};
  std::string line;
  while (std::getline(lines, line)) {
    INFO(line);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0)
      continue;
    CHECK(std::regex_match(line, sample));
  }
  auto has = [&](const std::string& s) {
    INFO(s);
    CHECK(text.find(s + "\n") != std::string::npos);
  };
  has(
    R"(sv_verifications_total{outcome="ok",failure_kind="",state="",cause=""} 1)");
  has(
    R"(sv_verifications_total{outcome="failed",failure_kind="verifier_error",state="exec",cause="timeout"} 1)");
  has(R"(sv_http_requests_total{code="200"} 2)");
  has(R"(sv_http_requests_total{code="404"} 1)");
  has("sv_in_flight 0");
  has("sv_cancelled_total 1");
  has("sv_sandboxes_live 1");
  has("sv_provider_restarts_total 1");
  has(R"(sv_state_seconds_bucket{state="create",le="0.005"} 1)");
  has(R"(sv_verification_seconds_bucket{le="1"} 1)");
  has(R"(sv_verification_seconds_bucket{le="2.5"} 2)");
  has(R"(sv_verification_seconds_bucket{le="+Inf"} 2)");
  has("sv_verification_seconds_count 2");
}

TEST_CASE("without supervisor stats the sandbox gauges are left out") {
  metrics m;
  auto text = m.render(std::nullopt);
  CHECK(text.find("sv_sandboxes_live") == std::string::npos);
  CHECK(text.find("sv_in_flight 0\n") != std::string::npos);
}
