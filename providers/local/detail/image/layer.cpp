#include "providers/local/detail/image/layer.hpp"

#include "providers/local/detail/host/unique_fd.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <zlib.h>

namespace sv::detail {

namespace {

constexpr size_t block = 512;
/// Most bytes of one pax or GNU long-name record.
constexpr uint64_t max_meta_bytes = 1 << 20;
/// Most components of one name.
constexpr size_t max_depth = 256;

[[noreturn]] void fail(const std::string& name, const std::string& why) {
  throw layer_error("entry \"" + name.substr(0, 200) + "\": " + why);
}

[[noreturn]] void fail_errno(const std::string& name, const std::string& what) {
  fail(name, what + ": " + std::strerror(errno));
}

/// The layer's bytes, decompressed when they are gzip (zlib reads plain
/// data as is).
class stream {
public:
  /// Reads at most `budget` bytes of the decompressed stream, and none
  /// once `deadline` has passed.
  stream(const std::string& path, uint64_t budget,
         std::chrono::steady_clock::time_point deadline)
      : budget_(budget), deadline_(deadline) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
      throw layer_error("cannot open layer " + path + ": " +
                        std::strerror(errno));
    gz_ = ::gzdopen(fd, "rb");
    if (gz_ == nullptr) {
      ::close(fd);
      throw layer_error("cannot read layer " + path);
    }
    ::gzbuffer(gz_, 128 * 1024);
  }
  ~stream() {
    if (gz_ != nullptr)
      ::gzclose(gz_);
  }
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  /// Reads exactly `n` bytes (false at a clean end before any byte).
  bool read(char* out, size_t n) {
    size_t got = 0;
    while (got < n) {
      auto chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1 << 20));
      int r = ::gzread(gz_, out + got, chunk);
      if (r < 0) {
        int code = 0;
        auto* msg = ::gzerror(gz_, &code);
        throw layer_error(std::string{"the layer is not a valid gzip or tar "
                                      "stream: "} +
                          (msg ? msg : "read error"));
      }
      if (r == 0) {
        if (got == 0)
          return false;
        throw layer_error("the layer ends inside an entry (truncated)");
      }
      got += static_cast<size_t>(r);
      auto before = read_;
      read_ += static_cast<uint64_t>(r);
      if (read_ > budget_)
        throw layer_error("the layers' tar streams exceed their bound (the "
                          "store's max_image_stream_bytes)");
      // The clock, once per MiB read (every entry reads its header).
      if ((before >> 20) != (read_ >> 20) &&
          std::chrono::steady_clock::now() >= deadline_)
        throw layer_error("unpacking did not finish before the create's "
                          "deadline");
    }
    return true;
  }

  /// Bytes of the decompressed stream read so far.
  uint64_t bytes_read() const { return read_; }

  void skip(uint64_t n) {
    char buf[64 * 1024];
    while (n > 0) {
      auto chunk = static_cast<size_t>(std::min<uint64_t>(n, sizeof buf));
      if (!read(buf, chunk))
        throw layer_error("the layer ends inside an entry (truncated)");
      n -= chunk;
    }
  }

private:
  gzFile gz_ = nullptr;
  uint64_t budget_;
  std::chrono::steady_clock::time_point deadline_;
  uint64_t read_ = 0;
};

/// A numeric field: octal, or base-256 (GNU) when its high bit is set.
uint64_t number(const char* field, size_t len, const char* what) {
  auto* p = reinterpret_cast<const unsigned char*>(field);
  if ((p[0] & 0x80) != 0) {
    if ((p[0] & 0x40) != 0)
      throw layer_error(std::string{"negative "} + what + " in a tar header");
    uint64_t v = p[0] & 0x3f;
    for (size_t i = 1; i < len; ++i) {
      if (v >> 55 != 0)
        throw layer_error(std::string{what} + " out of range in a tar header");
      v = (v << 8) | p[i];
    }
    return v;
  }
  uint64_t v = 0;
  size_t i = 0;
  while (i < len && (field[i] == ' ' || field[i] == '\0'))
    ++i;
  for (; i < len && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (v >> 60 != 0)
      throw layer_error(std::string{what} + " out of range in a tar header");
    v = v * 8 + static_cast<uint64_t>(field[i] - '0');
  }
  return v;
}

std::string text(const char* field, size_t len) {
  return std::string(field, ::strnlen(field, len));
}

bool checksum_ok(const char* h) {
  uint64_t sum = 0;
  for (size_t i = 0; i < block; ++i)
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(h[i]);
  return sum == number(h + 148, 8, "checksum");
}

/// The components of an entry's name, or a layer_error: no absolute name,
/// no `..`, no NUL; `.` and empty components dropped.
std::vector<std::string> components(const std::string& name) {
  if (name.empty())
    fail(name, "empty name");
  if (name.front() == '/')
    fail(name, "absolute name");
  if (name.find('\0') != std::string::npos)
    fail(name, "NUL in the name");
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= name.size()) {
    auto end = name.find('/', start);
    if (end == std::string::npos)
      end = name.size();
    auto part = name.substr(start, end - start);
    if (part == "..")
      fail(name, "\"..\" in the name");
    if (!part.empty() && part != ".")
      out.push_back(std::move(part));
    start = end + 1;
  }
  if (out.size() > max_depth)
    fail(name, "nested too deep");
  return out;
}

std::string joined(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i)
    out += (i ? "/" : "") + parts[i];
  return out;
}

/// Removes `name` in `dir` and everything below it, following no symlink.
bool remove_at(int dir, const std::string& name) {
  struct stat st;
  if (::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return errno == ENOENT;
  if (!S_ISDIR(st.st_mode))
    return ::unlinkat(dir, name.c_str(), 0) == 0 || errno == ENOENT;
  int fd = ::openat(dir, name.c_str(),
                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return false;
  auto* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  std::vector<std::string> names;
  while (auto* e = ::readdir(d)) {
    std::string child = e->d_name;
    if (child != "." && child != "..")
      names.push_back(std::move(child));
  }
  bool ok = true;
  for (auto& child : names)
    ok = remove_at(::dirfd(d), child) && ok;
  ::closedir(d);
  return (ok && ::unlinkat(dir, name.c_str(), AT_REMOVEDIR) == 0) ||
         errno == ENOENT;
}

/// Applies one layer onto the tree open as `root`.
class applier {
public:
  applier(int root, const layer_limits& limits, layer_totals& totals)
      : root_(root), limits_(limits), totals_(totals) {}

  void run(stream& in) {
    char h[block];
    std::string long_name, long_link;
    std::string pax_path, pax_link;
    uint64_t pax_size = 0;
    bool has_pax_size = false;
    int zero_blocks = 0;
    while (in.read(h, block)) {
      if (std::all_of(h, h + block, [](char c) { return c == 0; })) {
        if (++zero_blocks == 2)
          break;
        continue;
      }
      zero_blocks = 0;
      if (!checksum_ok(h))
        throw layer_error("a tar header's checksum does not match (not a "
                          "tar layer, or a corrupt one)");
      char type = h[156];
      uint64_t size = number(h + 124, 12, "size");
      if (type == 'x' || type == 'g' || type == 'L' || type == 'K') {
        if (size > max_meta_bytes)
          throw layer_error("a pax or long-name record is too large");
        std::string data(size, '\0');
        if (size > 0 && !in.read(data.data(), size))
          throw layer_error("the layer ends inside an entry (truncated)");
        in.skip(padding(size));
        if (type == 'L')
          long_name = text(data.data(), data.size());
        else if (type == 'K')
          long_link = text(data.data(), data.size());
        else if (type == 'x')
          parse_pax(data, pax_path, pax_link, pax_size, has_pax_size);
        continue;
      }
      std::string name;
      auto magic = text(h + 257, 6);
      if (magic == "ustar" && h[345] != '\0')
        name = text(h + 345, 155) + "/" + text(h + 0, 100);
      else
        name = text(h + 0, 100);
      std::string link = text(h + 157, 100);
      if (!long_name.empty())
        name = long_name;
      if (!long_link.empty())
        link = long_link;
      if (!pax_path.empty())
        name = pax_path;
      if (!pax_link.empty())
        link = pax_link;
      if (has_pax_size)
        size = pax_size;
      long_name.clear();
      long_link.clear();
      pax_path.clear();
      pax_link.clear();
      has_pax_size = false;
      if (++totals_.entries > limits_.max_entries)
        throw layer_error("more than " + std::to_string(limits_.max_entries) +
                          " entries (the store's max_image_entries)");
      entry e;
      e.name = name;
      e.link = link;
      e.type = type;
      e.size = size;
      e.mode = static_cast<mode_t>(number(h + 100, 8, "mode") & 07777);
      e.uid = static_cast<uid_t>(number(h + 108, 8, "uid"));
      e.gid = static_cast<gid_t>(number(h + 116, 8, "gid"));
      e.mtime = static_cast<time_t>(number(h + 136, 12, "mtime"));
      consumed_ = 0;
      apply(e, in);
      // What the entry's kind does not read (a directory's, a whiteout's).
      in.skip(size - consumed_ + padding(size));
    }
  }

private:
  struct entry {
    std::string name;
    std::string link;
    char type = 0;
    uint64_t size = 0;
    mode_t mode = 0;
    uid_t uid = 0;
    gid_t gid = 0;
    time_t mtime = 0;
  };

  static uint64_t padding(uint64_t size) {
    return (block - size % block) % block;
  }

  static void parse_pax(const std::string& data, std::string& path,
                        std::string& link, uint64_t& size, bool& has_size) {
    size_t pos = 0;
    while (pos < data.size()) {
      auto space = data.find(' ', pos);
      if (space == std::string::npos)
        break;
      uint64_t len = 0;
      for (size_t i = pos; i < space; ++i) {
        if (data[i] < '0' || data[i] > '9' || len > data.size())
          throw layer_error("a malformed pax record");
        len = len * 10 + static_cast<uint64_t>(data[i] - '0');
      }
      if (len == 0 || pos + len > data.size() || space >= pos + len)
        throw layer_error("a malformed pax record");
      auto record = data.substr(space + 1, pos + len - space - 2);
      auto eq = record.find('=');
      if (eq != std::string::npos) {
        auto key = record.substr(0, eq);
        auto value = record.substr(eq + 1);
        if (key == "path")
          path = value;
        else if (key == "linkpath")
          link = value;
        else if (key == "size") {
          size = 0;
          for (char c : value) {
            if (c < '0' || c > '9' || size > (1ull << 56))
              throw layer_error("a malformed pax size");
            size = size * 10 + static_cast<uint64_t>(c - '0');
          }
          has_size = true;
        }
      }
      pos += len;
    }
  }

  /// The directory holding the last component of `parts`, opened through
  /// real directories only (created 0755 when missing).
  unique_fd parent_of(const std::string& name,
                      const std::vector<std::string>& parts) {
    unique_fd dir{::fcntl(root_, F_DUPFD_CLOEXEC, 0)};
    if (!dir)
      fail_errno(name, "cannot open the tree");
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      int fd = ::openat(dir.get(), parts[i].c_str(),
                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) {
        // A directory made is an entry, as if the layer had listed it.
        if (++totals_.entries > limits_.max_entries)
          throw layer_error("more than " + std::to_string(limits_.max_entries) +
                            " entries (the store's max_image_entries)");
        if (::mkdirat(dir.get(), parts[i].c_str(), 0755) != 0 &&
            errno != EEXIST)
          fail_errno(name, "cannot make its parent directory");
        fd = ::openat(dir.get(), parts[i].c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      }
      if (fd < 0) {
        if (errno == ELOOP || errno == ENOTDIR)
          fail(name, "its parent \"" + joined(parts, i + 1) +
                       "\" is a symlink or not a directory");
        fail_errno(name, "cannot open its parent directory");
      }
      dir.reset(fd);
    }
    return dir;
  }

  /// Removes what is at `leaf` in `dir`, unless both it and the new entry
  /// are directories.
  void clear_place(int dir, const std::string& leaf, const entry& e) {
    struct stat st;
    if (::fstatat(dir, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
      return;
    if (S_ISDIR(st.st_mode) && e.type == '5')
      return;
    if (!remove_at(dir, leaf))
      fail_errno(e.name, "cannot replace what a lower layer put there");
  }

  void own(int dir, const std::string& leaf, const entry& e, bool link) {
    if (::geteuid() == 0 &&
        ::fchownat(dir, leaf.c_str(), e.uid, e.gid, AT_SYMLINK_NOFOLLOW) != 0)
      fail_errno(e.name, "cannot set its owner");
    if (!link && ::fchmodat(dir, leaf.c_str(), e.mode & ~mode_t{06000}, 0) != 0)
      fail_errno(e.name, "cannot set its mode");
  }

  void apply(const entry& e, stream& in) {
    auto parts = components(e.name);
    if (parts.empty()) { // the root itself
      if (e.type != '5')
        fail(e.name, "names the root but is not a directory");
      return;
    }
    auto leaf = parts.back();
    auto dir = parent_of(e.name, parts);
    auto path = joined(parts, parts.size());
    if (leaf == ".wh..wh..opq") {
      opaque(dir.get(), joined(parts, parts.size() - 1));
      return;
    }
    if (leaf.compare(0, 4, ".wh.") == 0) {
      auto hidden = leaf.substr(4);
      if (hidden.empty() || hidden == "." || hidden == "..")
        fail(e.name, "a malformed whiteout");
      if (!remove_at(dir.get(), hidden))
        fail_errno(e.name, "cannot apply the whiteout");
      return;
    }
    made_.insert(path);
    switch (e.type) {
    case '0':
    case '\0':
    case '7':
      return regular(dir.get(), leaf, e, in);
    case '5':
      clear_place(dir.get(), leaf, e);
      if (::mkdirat(dir.get(), leaf.c_str(), 0700) != 0 && errno != EEXIST)
        fail_errno(e.name, "cannot make the directory");
      own(dir.get(), leaf, e, false);
      return;
    case '2':
      if (e.link.empty() || e.link.size() > 4095)
        fail(e.name, "a symlink with an empty or too long target");
      clear_place(dir.get(), leaf, e);
      // Never followed here: resolved inside the sandbox only.
      if (::symlinkat(e.link.c_str(), dir.get(), leaf.c_str()) != 0)
        fail_errno(e.name, "cannot make the symlink");
      own(dir.get(), leaf, e, true);
      return;
    case '1': {
      auto target = components(e.link);
      if (target.empty())
        fail(e.name, "a hard link to the root");
      auto from = parent_of(e.link, target);
      struct stat st;
      if (::fstatat(from.get(), target.back().c_str(), &st,
                    AT_SYMLINK_NOFOLLOW) != 0)
        fail_errno(e.name, "its hard link target \"" + e.link +
                             "\" is not in the tree");
      if (S_ISDIR(st.st_mode))
        fail(e.name, "a hard link to a directory");
      if (joined(target, target.size()) == path)
        return;
      clear_place(dir.get(), leaf, e);
      if (::linkat(from.get(), target.back().c_str(), dir.get(), leaf.c_str(),
                   0) != 0)
        fail_errno(e.name, "cannot make the hard link");
      return;
    }
    case '6':
      clear_place(dir.get(), leaf, e);
      if (::mkfifoat(dir.get(), leaf.c_str(), 0600) != 0)
        fail_errno(e.name, "cannot make the fifo");
      own(dir.get(), leaf, e, false);
      return;
    case '3':
    case '4':
      fail(e.name, "a device node (refused)");
    default:
      fail(e.name, std::string{"an unknown entry type '"} + e.type + "'");
    }
  }

  void regular(int dir, const std::string& leaf, const entry& e, stream& in) {
    if (e.size > limits_.max_bytes - std::min(limits_.max_bytes, totals_.bytes))
      fail(e.name, "the image's files exceed " +
                     std::to_string(limits_.max_bytes) +
                     " bytes (the store's max_image_bytes)");
    totals_.bytes += e.size;
    clear_place(dir, leaf, e);
    unique_fd out{::openat(dir, leaf.c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                           0600)};
    if (!out)
      fail_errno(e.name, "cannot create the file");
    char buf[64 * 1024];
    uint64_t left = e.size;
    while (left > 0) {
      auto chunk = static_cast<size_t>(std::min<uint64_t>(left, sizeof buf));
      if (!in.read(buf, chunk))
        throw layer_error("the layer ends inside an entry (truncated)");
      size_t done = 0;
      while (done < chunk) {
        auto n = ::write(out.get(), buf + done, chunk - done);
        if (n < 0) {
          if (errno == EINTR)
            continue;
          fail_errno(e.name, "cannot write the file");
        }
        done += static_cast<size_t>(n);
      }
      left -= chunk;
      consumed_ += chunk;
    }
    if (::geteuid() == 0 && ::fchown(out.get(), e.uid, e.gid) != 0)
      fail_errno(e.name, "cannot set its owner");
    // After chown, which clears them anyway: no setuid or setgid bit.
    if (::fchmod(out.get(), e.mode & ~mode_t{06000}) != 0)
      fail_errno(e.name, "cannot set its mode");
    // Kept, so that compiled Python files stay valid.
    struct timespec times[2] = {{e.mtime, 0}, {e.mtime, 0}};
    ::futimens(out.get(), times);
  }

  /// Hides the lower layers' children of `rel` (those this layer did not
  /// make).
  void opaque(int dir, const std::string& rel) {
    auto* d = ::fdopendir(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
    if (d == nullptr)
      fail_errno(rel, "cannot read the opaque directory");
    std::vector<std::string> names;
    while (auto* e = ::readdir(d)) {
      std::string child = e->d_name;
      if (child != "." && child != ".." &&
          made_.count(rel.empty() ? child : rel + "/" + child) == 0)
        names.push_back(std::move(child));
    }
    ::closedir(d);
    for (auto& child : names)
      if (!remove_at(dir, child))
        fail_errno(rel + "/" + child, "cannot hide it (opaque directory)");
  }

  int root_;
  const layer_limits& limits_;
  layer_totals& totals_;
  /// What this layer made: an opaque directory keeps it.
  std::set<std::string> made_;
  /// Bytes of the current entry's content read.
  uint64_t consumed_ = 0;
};

} // namespace

void apply_layer(const std::string& blob, const std::string& tree,
                 const layer_limits& limits, layer_totals& totals,
                 std::chrono::steady_clock::time_point deadline) {
  unique_fd root{
    ::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)};
  if (!root)
    throw layer_error("cannot open the tree " + tree + ": " +
                      std::strerror(errno));
  if (std::chrono::steady_clock::now() >= deadline)
    throw layer_error("unpacking did not finish before the create's deadline");
  stream in{blob,
            limits.max_stream_bytes -
              std::min(limits.max_stream_bytes, totals.stream_bytes),
            deadline};
  applier{root.get(), limits, totals}.run(in);
  totals.stream_bytes += in.bytes_read();
}

bool remove_tree(const std::string& path) {
  auto slash = path.rfind('/');
  auto parent = slash == 0 ? std::string{"/"} : path.substr(0, slash);
  unique_fd dir{::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (!dir)
    return errno == ENOENT;
  return remove_at(dir.get(), path.substr(slash + 1));
}

} // namespace sv::detail
