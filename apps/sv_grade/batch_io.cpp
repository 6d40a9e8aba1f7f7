#include "apps/sv_grade/batch_io.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

namespace sv::grade {

namespace {

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

} // namespace

void open_io(const io_request& opts, batch_io& io) {
  if (opts.input != "-") {
    if (std::filesystem::is_directory(opts.input))
      throw usage_error("input " + opts.input + ": is a directory");
    io.in_file.fd = ::open(opts.input.c_str(), O_RDONLY | O_CLOEXEC);
    if (io.in_file.fd < 0)
      throw usage_error("input " + opts.input + ": " + std::strerror(errno));
    io.in = io.in_file.fd;
  }
  struct stat in_st {};
  bool in_known = ::fstat(io.in, &in_st) == 0 && S_ISREG(in_st.st_mode);
  // The input is opened once and read once: a pipe, a FIFO or /dev/stdin
  // has no second reading (counting its lines would eat them). A regular
  // file's lines are counted through the same descriptor, by offset.
  if (in_known && opts.input != "-")
    io.total = count_lines(io.in);
  struct stat out_st {};
  if (opts.output != "-") {
    if (in_known && ::stat(opts.output.c_str(), &out_st) == 0 &&
        same_file(in_st, out_st))
      throw usage_error("--output " + opts.output +
                        " is the input file: it would be overwritten");
  } else if (in_known && ::fstat(STDOUT_FILENO, &out_st) == 0 &&
             same_file(in_st, out_st)) {
    throw usage_error("standard output is the input file");
  }
  if (opts.resume && opts.output == "-")
    throw usage_error("--resume needs --output FILE");
  if (opts.resume && ::stat(opts.output.c_str(), &out_st) == 0 &&
      !S_ISREG(out_st.st_mode))
    throw usage_error("--resume needs a regular --output file: " + opts.output +
                      " is not one");
  if (!opts.summary_json.empty()) {
    io.summary_file.fd = ::open(opts.summary_json.c_str(),
                                O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (io.summary_file.fd < 0)
      throw std::runtime_error("--summary-json " + opts.summary_json + ": " +
                               std::strerror(errno));
  }
  if (opts.output == "-")
    return;
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC;
  if (opts.resume) {
    io.answered = read_answered(opts.output);
  } else {
    flags |= O_TRUNC;
  }
  io.out_file.fd = ::open(opts.output.c_str(), flags, 0644);
  if (io.out_file.fd < 0)
    throw usage_error("output " + opts.output + ": " + std::strerror(errno));
  io.out = io.out_file.fd;
  if (opts.resume) {
    struct stat st {};
    if (::fstat(io.out, &st) == 0 && S_ISREG(st.st_mode)) {
      if (io.answered.torn &&
          ::ftruncate(io.out, static_cast<off_t>(io.answered.good_bytes)) != 0)
        throw std::runtime_error(
          "output " + opts.output +
          ": cannot cut its torn last line: " + std::strerror(errno));
      ::lseek(io.out, 0, SEEK_END);
    }
    if (io.answered.torn)
      spdlog::warn("output {}: cut off a torn last line", opts.output);
  }
}

uint64_t count_lines(int fd) {
  uint64_t n = 0;
  char last = '\n';
  char buf[1 << 16];
  off_t at = 0;
  for (;;) {
    auto got = ::pread(fd, buf, sizeof(buf), at);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      break;
    at += got;
    for (ssize_t i = 0; i < got; ++i)
      n += buf[i] == '\n' ? 1 : 0;
    last = buf[got - 1];
  }
  return n + (last != '\n' ? 1 : 0);
}

} // namespace sv::grade
