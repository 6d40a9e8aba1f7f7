#pragma once

// Requests that wait for a condition of their owner's state ("no stop left",
// "a node joined", "no sandbox in use"): each is answered exactly once, when
// the condition holds, at its own wait (a delayed message to the owner that
// carries its token), or when the owner exits (its state's destructor
// answers the rest: CAF 0.17 has no broken-promise signal, so whoever holds
// a promise must answer it).

#include <caf/typed_response_promise.hpp>
#include <cstdint>
#include <map>
#include <utility>

namespace sv {

/// The promises of the waiting requests of one condition, by token.
template <class T>
class waiters {
public:
  waiters() = default;
  waiters(const waiters&) = delete;
  waiters& operator=(const waiters&) = delete;

  /// Answers `rp` with `now` at once if `done` or if there is no time to
  /// wait; else keeps it and has `self` send itself `(due, token)` after
  /// `wait`, for `expire`.
  template <class Self, class DueAtom>
  caf::typed_response_promise<T> wait(Self* self, bool done, T now,
                                      caf::timespan wait, DueAtom due) {
    auto rp = self->template make_response_promise<T>();
    if (done || wait <= caf::timespan{0}) {
      rp.deliver(std::move(now));
      return rp;
    }
    auto token = next_++;
    waiting_.emplace(token, rp);
    self->delayed_send(self, wait, due, token);
    return rp;
  }

  /// The wait of `token` is over: it hears `value`, unless it was answered
  /// already.
  void expire(uint64_t token, T value) {
    auto i = waiting_.find(token);
    if (i == waiting_.end())
      return;
    auto rp = std::move(i->second);
    waiting_.erase(i);
    rp.deliver(std::move(value));
  }

  /// Every waiting request hears `value`.
  void answer_all(const T& value) {
    auto all = std::move(waiting_);
    waiting_.clear();
    for (auto& entry : all)
      entry.second.deliver(value);
  }

  bool empty() const { return waiting_.empty(); }

private:
  std::map<uint64_t, caf::typed_response_promise<T>> waiting_;
  uint64_t next_ = 0;
};

} // namespace sv
