// The image layer extractor (providers/local/detail/image/layer.cpp) on crafted
// tar streams: what a layer may do to its tree, and every hostile case
// leaves the host untouched and names the entry.

#include "providers/local/detail/image/layer.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <zlib.h>

using namespace sv::detail;

namespace {

/// One tar entry to write.
struct tar_entry {
  tar_entry(std::string name, char type = '0', std::string data = {},
            std::string link = {}, unsigned mode = 0644)
      : name(std::move(name)), type(type), data(std::move(data)),
        link(std::move(link)), mode(mode) {}
  std::string name;
  char type;
  std::string data;
  std::string link;
  unsigned mode;
  unsigned uid = 0;
};

void octal(char* field, size_t len, uint64_t value) {
  // Right-aligned, zero-filled, NUL-terminated.
  for (size_t i = len - 1; i-- > 0; value /= 8)
    field[i] = static_cast<char>('0' + value % 8);
  field[len - 1] = '\0';
}

/// A ustar stream of `entries` (names longer than 100 bytes through pax).
std::string make_tar(const std::vector<tar_entry>& entries) {
  std::string out;
  auto header = [&](const std::string& name, char type, uint64_t size,
                    const std::string& link, unsigned mode, unsigned uid) {
    char h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    octal(h + 100, 8, mode);
    octal(h + 108, 8, uid);
    octal(h + 116, 8, uid);
    octal(h + 124, 12, size);
    octal(h + 136, 12, 1700000000);
    h[156] = type;
    std::memcpy(h + 157, link.data(), std::min<size_t>(link.size(), 100));
    std::memcpy(h + 257, "ustar", 6);
    h[263] = '0';
    h[264] = '0';
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h)
      sum += c;
    octal(h + 148, 7, sum);
    out.append(h, 512);
  };
  auto body = [&](const std::string& data) {
    out += data;
    out.append((512 - data.size() % 512) % 512, '\0');
  };
  for (auto& e : entries) {
    if (e.name.size() > 100) {
      auto record = " path=" + e.name + "\n";
      auto len = record.size() + 3;
      auto pax = std::to_string(len) + record;
      if (pax.size() != len)
        pax = std::to_string(len + 1) + record;
      header("PaxHeader", 'x', pax.size(), "", 0644, 0);
      body(pax);
    }
    header(e.name, e.type, e.data.size(), e.link, e.mode, e.uid);
    body(e.data);
  }
  out.append(1024, '\0');
  return out;
}

struct scratch {
  std::string dir;
  scratch() {
    char tmpl[] = "/tmp/sv-layer-test-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ::mkdir((dir + "/tree").c_str(), 0755);
  }
  ~scratch() { remove_tree(dir); }
  std::string tree() const { return dir + "/tree"; }

  /// Writes `tar` (gzip-compressed with `gz`) as a blob; returns its path.
  std::string blob(const std::string& tar, bool gz = false) {
    auto path = dir + "/blob" + std::to_string(++n);
    if (gz) {
      auto* f = ::gzopen(path.c_str(), "wb");
      ::gzwrite(f, tar.data(), static_cast<unsigned>(tar.size()));
      ::gzclose(f);
    } else {
      std::ofstream{path, std::ios::binary} << tar;
    }
    return path;
  }

  void apply(const std::vector<tar_entry>& entries, bool gz = false,
             layer_limits limits = {}) {
    layer_totals totals;
    apply_layer(blob(make_tar(entries), gz), tree(), limits, totals);
  }
  int n = 0;
};

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string read(const std::string& path) {
  std::ifstream in{path};
  return std::string{std::istreambuf_iterator<char>{in}, {}};
}

} // namespace

TEST_CASE("a layer unpacks files, directories, links and modes, gzip or not",
          "[image]") {
  for (bool gz : {false, true}) {
    scratch s;
    s.apply({{"usr/", '5', "", "", 0755},
             {"usr/bin/tool", '0', "#!/bin/sh\n", "", 0755},
             {"./etc/marker", '0', "hello", "", 0640},
             {"etc/link", '2', "", "marker"},
             {"etc/hard", '1', "", "etc/marker"},
             {"opt/" + std::string(120, 'x'), '0', "long", ""}},
            gz);
    auto t = s.tree();
    CHECK(read(t + "/etc/marker") == "hello");
    CHECK(read(t + "/etc/hard") == "hello");
    struct stat st;
    REQUIRE(::lstat((t + "/usr/bin/tool").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0755);
    REQUIRE(::lstat((t + "/etc/marker").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_mtime == 1700000000);
    REQUIRE(::lstat((t + "/etc/link").c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    CHECK(read(t + "/opt/" + std::string(120, 'x')) == "long");
  }
}

TEST_CASE("whiteouts and opaque directories hide what lower layers made",
          "[image]") {
  scratch s;
  s.apply({{"a/keep", '0', "1"},
           {"a/gone", '0', "2"},
           {"b/old1", '0', "3"},
           {"b/sub/old2", '0', "4"},
           {"c", '0', "file"}});
  s.apply({{"a/.wh.gone", '0', ""},
           {"b/new", '0', "5"},
           {"b/.wh..wh..opq", '0', ""},
           {"c/", '5', "", "", 0755},
           {"c/inside", '0', "6"}});
  auto t = s.tree();
  CHECK(exists(t + "/a/keep"));
  CHECK_FALSE(exists(t + "/a/gone"));
  CHECK_FALSE(exists(t + "/a/.wh.gone"));
  CHECK(read(t + "/b/new") == "5"); // this layer's, kept
  CHECK_FALSE(exists(t + "/b/old1"));
  CHECK_FALSE(exists(t + "/b/sub"));
  CHECK_FALSE(exists(t + "/b/.wh..wh..opq"));
  CHECK(read(t + "/c/inside") == "6"); // a file replaced by a directory
}

TEST_CASE("setuid and setgid bits never survive", "[image]") {
  scratch s;
  s.apply({{"bin/su", '0', "x", "", 06755}, {"d/", '5', "", "", 02775}});
  struct stat st;
  REQUIRE(::lstat((s.tree() + "/bin/su").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0755);
  REQUIRE(::lstat((s.tree() + "/d").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0775);
}

TEST_CASE("hostile layers are refused, naming the entry, and the host is "
          "untouched",
          "[image]") {
  scratch s;
  auto outside = s.dir + "/outside";
  ::mkdir(outside.c_str(), 0755);
  auto refused = [&](std::vector<tar_entry> entries, const std::string& why,
                     layer_limits limits = {}) {
    INFO(why);
    try {
      s.apply(entries, false, limits);
      FAIL("applied");
    } catch (const layer_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(why));
    }
  };
  refused({{"../outside/x", '0', "evil"}}, "\"..\" in the name");
  refused({{"a/../../outside/x", '0', "evil"}}, "\"..\" in the name");
  refused({{s.dir + "/outside/x", '0', "evil"}}, "absolute name");
  // A symlink to outside, then a file through it.
  refused({{"esc", '2', "", outside}, {"esc/x", '0', "evil"}},
          "is a symlink or not a directory");
  refused({{"rel", '2', "", "../../outside"}, {"rel/x", '0', "evil"}},
          "is a symlink or not a directory");
  // A hard link to a host file.
  refused({{"h", '1', "", "../outside/y"}}, "\"..\" in the name");
  refused({{"h", '1', "", "/etc/passwd"}}, "absolute name");
  refused({{"etc", '2', "", "/etc"}, {"h", '1', "", "etc/passwd"}},
          "is a symlink or not a directory");
  refused({{"dev/sda", '4', ""}}, "a device node");
  refused({{"dev/null", '3', ""}}, "a device node");
  refused({{"big", '0', std::string(2000, 'x')}}, "max_image_bytes",
          layer_limits{1000, 100});
  refused({{"a", '0', ""}, {"b", '0', ""}, {"c", '0', ""}}, "max_image_entries",
          layer_limits{1000, 2});
  CHECK_FALSE(exists(outside + "/x"));
  CHECK_FALSE(exists(outside + "/y"));
  CHECK_FALSE(exists(s.dir + "/x"));
  // A symlink in the tree stays a symlink; nothing was written through it.
  struct stat st;
  REQUIRE(::lstat((s.tree() + "/esc").c_str(), &st) == 0);
  CHECK(S_ISLNK(st.st_mode));
}

TEST_CASE("a corrupt or truncated layer is refused", "[image]") {
  scratch s;
  layer_totals totals;
  auto tar = make_tar({{"f", '0', std::string(3000, 'x')}});
  CHECK_THROWS_WITH(
    apply_layer(s.blob(tar.substr(0, 1500)), s.tree(), {}, totals),
    Catch::Contains("truncated"));
  auto bad = tar;
  bad[10] = 'Z';
  CHECK_THROWS_WITH(apply_layer(s.blob(bad), s.tree(), {}, totals),
                    Catch::Contains("checksum"));
  CHECK_THROWS_WITH(apply_layer(s.dir + "/missing", s.tree(), {}, totals),
                    Catch::Contains("cannot open layer"));
}

TEST_CASE("parents made, stream bytes and the deadline are bounded inside a "
          "layer",
          "[image]") {
  scratch s;
  layer_limits few;
  few.max_entries = 3;
  // One entry, four parents it makes: five entries.
  CHECK_THROWS_WITH(s.apply({{"a/b/c/d/f.txt", '0', "x"}}, false, few),
                    "more than 3 entries (the store's max_image_entries)");
  scratch t;
  layer_limits small;
  small.max_stream_bytes = 4096;
  // Well within max_bytes, past the stream bound.
  std::vector<tar_entry> big{{"big.txt", '0', std::string(8192, 'x')}};
  CHECK_THROWS_WITH(t.apply(big, true, small),
                    "the layers' tar streams exceed their bound (the store's "
                    "max_image_stream_bytes)");
  scratch u;
  layer_totals totals;
  CHECK_THROWS_WITH(
    apply_layer(u.blob(make_tar({{"f.txt", '0', "x"}})), u.tree(), {}, totals,
                std::chrono::steady_clock::now() - std::chrono::seconds{1}),
    "unpacking did not finish before the create's deadline");
  CHECK(!exists(u.tree() + "/f.txt"));
  // Within the bounds, all of it counts.
  scratch v;
  layer_totals ok;
  apply_layer(v.blob(make_tar({{"a/b/f.txt", '0', "x"}})), v.tree(), {}, ok);
  CHECK(ok.entries == 3);
  CHECK(ok.stream_bytes > 0);
}
