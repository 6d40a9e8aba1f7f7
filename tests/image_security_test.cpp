// Images against the provider's own bwrap (issue 21's overlay root): bwrap
// runs as root and follows symlinks where it makes its mount points, in a
// staging root where /oldroot is the host's /. An image's symlinks, or ones
// a sandbox plants between its execs, must never lead it onto a host path
// (the provider makes every mount point first: mount_points.hpp). Needs
// bwrap and root, like the rest of the isolation suite (its main skips).

#include "isolation_fixture.hpp"
#include "providers/local/detail/isolation.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

using namespace sv;
using namespace sv::test;

namespace {

namespace fs = std::filesystem;

/// Programs of the host a root file system gets (with the libraries ldd
/// names): sh and what the tests run in it.
const char* const rootfs_programs[] = {"/bin/dash", "/bin/mkdir", "/bin/mv",
                                       "/bin/ln",   "/bin/cat",   "/bin/chmod"};

/// The libraries `program` loads (ldd's absolute paths), with its loader.
std::vector<std::string> libraries_of(const std::string& program) {
  std::vector<std::string> out;
  auto* p = ::popen(("ldd " + program).c_str(), "r");
  if (!p)
    return out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    std::string text{line};
    auto pos = text.find('/');
    if (pos != std::string::npos)
      out.push_back(text.substr(pos, text.find_first_of(" \t\n(", pos) - pos));
  }
  ::pclose(p);
  return out;
}

/// A root file system that runs sh (the host's dash, a few coreutils and
/// their libraries), or false.
bool make_rootfs(const std::string& dir) {
  std::error_code ec;
  for (auto* program : rootfs_programs) {
    auto libs = libraries_of(program);
    if (libs.empty())
      return false;
    for (auto& lib : libs) {
      fs::create_directories(dir + fs::path{lib}.parent_path().string());
      fs::copy_file(lib, dir + lib, fs::copy_options::skip_existing, ec);
      if (ec)
        return false;
    }
    auto name = fs::path{program}.filename().string();
    fs::create_directories(dir + "/bin");
    fs::copy_file(program, dir + "/bin/" + (name == "dash" ? "sh" : name), ec);
    if (ec)
      return false;
  }
  return true;
}

void link(const std::string& target, const std::string& at) {
  REQUIRE(::symlink(target.c_str(), at.c_str()) == 0);
}

/// Prints the real uid and the effective capabilities (sh builtins only).
/// Root file system images may lie below the temporary directory.
void allow_tmp_images(local_provider_config& c) {
  const char* base = std::getenv("TMPDIR");
  c.image_dirs = {base && *base ? base : "/tmp"};
}

const char* const whoami =
  "while read k v r; do case $k in Uid:|CapEff:) echo $k $v;; esac; done "
  "< /proc/self/status";

std::string expected_whoami(uid_t uid) {
  return "Uid: " + std::to_string(uid) + "\nCapEff: 0000000000000000\n";
}

bool dir_is_empty(const std::string& dir) {
  return fs::is_empty(dir);
}

} // namespace

TEST_CASE("an image's symlinks at bwrap's mount points never reach the "
          "host") {
  auto f = make_isolated(allow_tmp_images);
  temp_dir host, rootfs;
  INFO("a root file system from the host's dash and coreutils");
  REQUIRE(make_rootfs(rootfs.path));
  auto on_host = "/oldroot" + host.path;
  REQUIRE(::mkdir((host.path + "/sbx").c_str(), 0755) == 0);
  link(".." + on_host + "/drop", rootfs.path + "/.sv-drop");
  link(on_host + "/sbx", rootfs.path + "/sandbox");
  link(on_host + "/tmp", rootfs.path + "/tmp");
  link(on_host + "/proc", rootfs.path + "/proc");
  link(on_host + "/dev", rootfs.path + "/dev");
  link(on_host + "/home", rootfs.path + "/home");
  // A multi-part workdir must lie below a hidden path (check_workdir).
  for (auto* workdir : {"/sandbox", "/home/a/b", "/tmp/work"}) {
    INFO(workdir);
    sandbox_spec spec;
    spec.image = rootfs.path;
    spec.workdir = workdir;
    auto h = f->create_with(spec);
    auto r = f->sh(h, std::string{"echo w > f; echo t > /tmp/f; "} + whoami);
    CHECK(r.return_code == 0);
    CHECK(r.stdout_text == expected_whoami(f->uid_of(h)));
    CHECK(read_text(f->dir_of(h) + "/f") == "w\n");
    f->stop_and_expect_gone(h);
    // Nothing made, bound or written on the host; the image unchanged.
    for (auto* name : {"/drop", "/tmp", "/proc", "/dev", "/home"})
      CHECK(!path_exists(host.path + name));
    CHECK(dir_is_empty(host.path + "/sbx"));
    CHECK(fs::is_symlink(rootfs.path + "/sandbox"));
    CHECK(fs::is_symlink(rootfs.path + "/.sv-drop"));
  }
}

TEST_CASE("an image's /sandbox over sv-drop's host directory cannot swap "
          "the uid drop") {
  auto drop = detail::find_drop_stub();
  INFO("sv-drop is built with the provider; images need it");
  REQUIRE(!drop.empty());
  auto before = read_text(drop);
  auto drop_dir = fs::path{drop}.parent_path().string();
  auto f = make_isolated(allow_tmp_images);
  temp_dir rootfs;
  INFO("a root file system from the host's dash and coreutils");
  REQUIRE(make_rootfs(rootfs.path));
  // Was: the sandbox's directory bound over sv-drop's host directory, so
  // the bind of sv-drop took the sandbox's file, run as uid 0.
  link("/oldroot" + drop_dir, rootfs.path + "/sandbox");
  sandbox_spec spec;
  spec.image = rootfs.path;
  auto h = f->create_with(spec);
  auto name = fs::path{drop}.filename().string();
  REQUIRE(
    f->upload(h, "/sandbox", {{name, "#!/bin/sh\necho as root\n"}}).value);
  REQUIRE(f->sh(h, "chmod 755 " + name + " || true").return_code == 0);
  auto r = f->sh(h, whoami);
  CHECK(r.return_code == 0);
  CHECK(r.stdout_text == expected_whoami(f->uid_of(h)));
  f->stop_and_expect_gone(h);
  CHECK(read_text(drop) == before);
}

TEST_CASE("an image whose mount point cannot be made is refused at create") {
  auto f = make_isolated(allow_tmp_images);
  temp_dir rootfs;
  INFO("a root file system from the host's dash and coreutils");
  REQUIRE(make_rootfs(rootfs.path));
  fs::create_directories(rootfs.path + "/.sv-drop/full");
  sandbox_spec spec;
  spec.image = rootfs.path;
  auto r = f->ask<sandbox_handle>(create_atom::value, spec);
  REQUIRE(!r.value);
  CHECK(r.code() == code(provider_errc::unavailable));
  CHECK(r.message() ==
        "image \"" + rootfs.path +
          "\" unusable: cannot make the mount point /.sv-drop: cannot remove "
          "what is there: Directory not empty");
}

TEST_CASE("what one exec plants in an image's root does not steer the next "
          "exec's bwrap") {
  auto f = make_isolated(allow_tmp_images);
  temp_dir host, rootfs;
  INFO("a root file system from the host's dash and coreutils");
  REQUIRE(make_rootfs(rootfs.path));
  auto on_host = "/oldroot" + host.path;
  sandbox_spec spec;
  spec.image = rootfs.path;
  spec.workdir = "/home/w/sandbox";
  auto h = f->create_with(spec);
  // The root is the sandbox's to write in (sticky, like /tmp)...
  auto r =
    f->sh(h, "mkdir -p /tests/x && echo ok > /tests/x/f && cat /tests/x/f");
  CHECK(r.stdout_text == "ok\n");
  // ...but not its mount points or their parents: renamed away and
  // replaced by symlinks to the host, bwrap would make them there.
  f->sh(h, "cd /; mv /home/w /home/w.old; mv /home /home.old; mkdir -p "
           "/home/w; ln -s " +
             on_host + "/made /home/w/sandbox; mv /.sv-drop /x; ln -s .." +
             on_host + "/drop /.sv-drop; mv /proc /p; ln -s " + on_host +
             "/proc /proc; true");
  r = f->sh(h, std::string{"echo w > f; "} + whoami);
  CHECK(r.return_code == 0);
  CHECK(r.stdout_text == expected_whoami(f->uid_of(h)));
  CHECK(read_text(f->dir_of(h) + "/f") == "w\n");
  f->stop_and_expect_gone(h);
  for (auto* name : {"/made", "/drop", "/proc"})
    CHECK(!path_exists(host.path + name));
}

TEST_CASE("what one exec plants in the sandbox's /tmp does not steer the "
          "next exec's bwrap to a workdir below it") {
  // The host's view, too: a workdir below /tmp is mounted in the sandbox's
  // own /tmp, which it writes between its execs.
  auto f = make_isolated(allow_tmp_images);
  temp_dir host;
  sandbox_spec spec;
  spec.workdir = "/tmp/a/work";
  auto h = f->create_with(spec);
  // An upload may make /tmp/a before bwrap ever does (the sandbox's then).
  REQUIRE(f->upload(h, "/tmp/a", {{"x.txt", "x"}}).value);
  f->sh(h, "cd /; mv /tmp/a /tmp/b; mkdir /tmp/a; ln -s /oldroot" + host.path +
             "/made /tmp/a/work; true");
  auto r = f->sh(h, std::string{"echo w > f; "} + whoami);
  CHECK(r.return_code == 0);
  CHECK(r.stdout_text == expected_whoami(f->uid_of(h)));
  CHECK(read_text(f->dir_of(h) + "/f") == "w\n");
  f->stop_and_expect_gone(h);
  CHECK(!path_exists(host.path + "/made"));
}

TEST_CASE("a root file system directory outside image_dirs is refused") {
  // The overlay's root takes the upper layer's owner and mode: a 0700 host
  // directory would be readable through it.
  auto f = make_isolated();
  temp_dir rootfs;
  REQUIRE(::chmod(rootfs.path.c_str(), 0700) == 0);
  INFO("a root file system from the host's dash and coreutils");
  REQUIRE(make_rootfs(rootfs.path));
  sandbox_spec spec;
  spec.image = rootfs.path;
  auto r = f->ask<sandbox_handle>(create_atom::value, spec);
  REQUIRE(!r.value);
  CHECK(r.code() == code(provider_errc::unavailable));
  CHECK(r.message() == "image \"" + rootfs.path +
                         "\" unavailable: root file "
                         "system directory " +
                         rootfs.path +
                         " does not lie in a directory of the provider's "
                         "image_dirs setting (empty: none may)");
}
