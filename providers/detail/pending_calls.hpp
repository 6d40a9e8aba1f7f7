#pragma once

// The calls of a provider actor that complete on threads of their own (the
// local registry's I/O threads, the remote provider's connection pool).
// Each call gets a number and keeps its requester's promise; its
// completion comes back to the actor as the message `(DoneAtom, call, T)`
// or `(DoneAtom, call, caf::error)` and is delivered there, on the actor's
// own thread (`finish`). The actor is held weakly: a completion never
// keeps a dead provider alive; for a dead one it runs `orphaned` (if any)
// on the completing thread, else it is dropped. What is still pending when
// the actor's state goes is failed (`fail_all`).

#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>

namespace sv {

template <class T>
using call_completion = std::function<void(caf::expected<T>)>;

template <class DoneAtom>
class pending_calls {
public:
  /// The number the next `start` gives.
  uint64_t next() const { return next_; }

  /// Registers a call of `self`: its promise and the completion to hand to
  /// the thread that does the work.
  template <class T, class Self>
  std::pair<caf::response_promise, call_completion<T>>
  start(Self* self, std::function<void(T&)> orphaned = {}) {
    auto call = next_++;
    auto rp = self->make_response_promise();
    pending_.emplace(call, rp);
    call_completion<T> done =
      [addr{self->address()}, call,
       orphaned{std::move(orphaned)}](caf::expected<T> x) {
        auto hdl = caf::actor_cast<caf::actor>(addr);
        if (!hdl) {
          if (x && orphaned)
            orphaned(*x);
          return;
        }
        if (x)
          caf::anon_send(hdl, DoneAtom::value, call, std::move(*x));
        else
          caf::anon_send(hdl, DoneAtom::value, call, std::move(x.error()));
      };
    return {std::move(rp), std::move(done)};
  }

  /// Delivers `x` (a value or a caf::error) to the requester of `call`, on
  /// the actor's thread; a call no longer pending is ignored.
  template <class T>
  void finish(uint64_t call, T&& x) {
    auto i = pending_.find(call);
    if (i == pending_.end())
      return;
    auto rp = std::move(i->second);
    pending_.erase(i);
    rp.deliver(std::forward<T>(x));
  }

  /// Fails every pending call with `err` (the actor is going).
  void fail_all(const caf::error& err) {
    for (auto& entry : pending_)
      entry.second.deliver(err);
    pending_.clear();
  }

private:
  std::unordered_map<uint64_t, caf::response_promise> pending_;
  uint64_t next_ = 1;
};

} // namespace sv
