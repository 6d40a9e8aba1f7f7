// sv-grade's bounded line reader and the --resume scan of an output file.

#include "apps/sv_grade/batch_line.hpp"
#include "apps/sv_grade/line_reader.hpp"
#include "apps/sv_grade/resume.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fcntl.h>
#include <string>
#include <sys/eventfd.h>
#include <unistd.h>

using namespace sv;
using namespace sv::grade;

namespace {

/// A temporary file holding `text`, rewound; closed by the caller.
int file_with(const std::string& text) {
  char name[] = "/tmp/sv-grade-test-XXXXXX";
  int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  ::unlink(name);
  REQUIRE(::write(fd, text.data(), text.size()) ==
          static_cast<ssize_t>(text.size()));
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

using status = line_reader::status;

} // namespace

TEST_CASE("the reader returns lines, a last one without newline too") {
  int fd = file_with("a\n\nbc\nd");
  line_reader reader{fd, -1, 100};
  std::string text;
  CHECK(reader.next(text) == status::line);
  CHECK(text == "a");
  CHECK(reader.next(text) == status::line);
  CHECK(text.empty());
  CHECK(reader.next(text) == status::line);
  CHECK(text == "bc");
  CHECK(reader.next(text) == status::line);
  CHECK(text == "d");
  CHECK(reader.next(text) == status::end);
  ::close(fd);
}

TEST_CASE("a line over the limit is skipped whole, the next one read") {
  std::string big(300000, 'x'); // spans several reads
  int fd = file_with("ok\n" + big + "\nafter\n" + big);
  line_reader reader{fd, -1, 1000};
  std::string text;
  CHECK(reader.next(text) == status::line);
  CHECK(reader.next(text) == status::too_long);
  CHECK(reader.skipped() == big.size());
  CHECK(reader.next(text) == status::line);
  CHECK(text == "after");
  CHECK(reader.next(text) == status::too_long);
  CHECK(reader.skipped() == big.size());
  CHECK(reader.next(text) == status::end);
  ::close(fd);
}

TEST_CASE("the wake descriptor stops a read blocked on a quiet pipe") {
  int p[2];
  REQUIRE(::pipe(p) == 0);
  int wake = ::eventfd(0, 0);
  REQUIRE(::write(p[1], "x\n", 2) == 2);
  line_reader reader{p[0], wake, 100};
  std::string text;
  CHECK(reader.next(text) == status::line);
  uint64_t one = 1;
  REQUIRE(::write(wake, &one, sizeof(one)) == sizeof(one));
  CHECK(reader.next(text) == status::stopped);
  ::close(p[0]);
  ::close(p[1]);
  ::close(wake);
}

TEST_CASE("an output line yields its line number and id") {
  batch_entry entry;
  entry.line = 42;
  entry.outcome.id = "a\"b";
  entry.outcome.ok = true;
  entry.outcome.result = json{{"line", 7}};
  uint64_t line = 0;
  bool has_line = false;
  std::string id;
  REQUIRE(scan_output_line(render_output_line(entry), line, has_line, id));
  CHECK(has_line);
  CHECK(line == 42);
  CHECK(id == "a\"b");
  REQUIRE(scan_output_line(R"({"id":null,"ok":false})", line, has_line, id));
  CHECK_FALSE(has_line);
  CHECK(id.empty());
  CHECK_FALSE(scan_output_line("not an output line", line, has_line, id));
}

TEST_CASE("the resume scan keeps complete lines and finds a torn one") {
  char name[] = "/tmp/sv-grade-test-XXXXXX";
  int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  std::string good = R"({"id":"a","ok":true,"line":1})"
                     "\n"
                     R"({"id":"b","ok":true})"
                     "\n";
  std::string text = good + R"({"id":"c","ok":tr)";
  REQUIRE(::write(fd, text.data(), text.size()) ==
          static_cast<ssize_t>(text.size()));
  ::close(fd);
  auto answered = read_answered(name);
  CHECK(answered.count == 2);
  CHECK(answered.lines.count(1) == 1);
  CHECK(answered.ids.count("b") == 1);
  CHECK(answered.torn);
  CHECK(answered.good_bytes == good.size());
  ::unlink(name);
  CHECK(read_answered(name).count == 0); // a missing file answers nothing
}
