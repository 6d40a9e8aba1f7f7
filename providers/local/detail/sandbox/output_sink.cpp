#include "providers/local/detail/sandbox/output_sink.hpp"

#include "messages/protocol.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace sv::detail {

namespace {

/// Room a log keeps for the note on dropped bytes.
constexpr uint64_t note_reserve = 256;

/// The smallest log cap that holds a head, the note and the tail.
constexpr uint64_t min_log_cap = log_tail_bytes + note_reserve + 1024;

} // namespace

output_sink::output_sink(int fd, uint64_t cap) : fd_(fd), cap_(cap) {
  head_ =
    fd < 0 ? cap : std::max(cap, min_log_cap) - log_tail_bytes - note_reserve;
}

output_sink output_sink::capture(uint64_t cap) {
  return output_sink{-1, cap};
}

output_sink output_sink::log(int fd, uint64_t cap) {
  return output_sink{fd, cap};
}

void output_sink::write(const char* data, size_t n) {
  total_ += n;
  if (fd_ >= 0)
    return append_log(data, n);
  auto take =
    std::min<uint64_t>(n, cap_ - std::min<uint64_t>(cap_, text_.size()));
  text_.append(data, take);
  dropped_ += n - take;
}

void output_sink::append_log(const char* data, size_t n) {
  // The head goes straight to the file.
  if (in_head_ < head_) {
    auto take = static_cast<size_t>(std::min<uint64_t>(n, head_ - in_head_));
    in_head_ += take;
    write_all(data, take);
    data += take;
    n -= take;
  }
  if (n == 0)
    return;
  // Beyond the head only the last log_tail_bytes are held back.
  if (n >= log_tail_bytes) {
    dropped_ += text_.size() + (n - log_tail_bytes);
    text_.assign(data + n - log_tail_bytes, log_tail_bytes);
    return;
  }
  text_.append(data, n);
  if (text_.size() > log_tail_bytes) {
    auto excess = text_.size() - log_tail_bytes;
    dropped_ += excess;
    text_.erase(0, excess);
  }
}

void output_sink::finish() {
  if (fd_ < 0)
    return;
  std::string rest;
  if (dropped_ > 0)
    rest = "\n[sv: " + std::to_string(dropped_) +
           " bytes of output dropped here: the log keeps the first " +
           std::to_string(head_) + " and the last " +
           std::to_string(text_.size()) + " bytes of " +
           std::to_string(total_) + "]\n";
  rest += text_;
  text_.clear();
  write_all(rest.data(), rest.size());
}

void output_sink::write_all(const char* data, size_t n) {
  for (size_t done = 0; done < n && write_error_.empty();) {
    auto k = ::write(fd_, data + done, n - done);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0)
      write_error_ = std::strerror(errno);
    else
      done += static_cast<size_t>(k);
  }
}

} // namespace sv::detail
