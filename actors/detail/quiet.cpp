#include "actors/detail/quiet.hpp"

#include <caf/delegated.hpp>
#include <caf/message_view.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/sec.hpp>
#include <spdlog/spdlog.h>

namespace sv {

caf::result<caf::message> log_and_drop_unexpected(caf::scheduled_actor* self,
                                                  caf::message_view& msg) {
  if (spdlog::should_log(spdlog::level::debug)) {
    auto text = to_string(msg.copy_content_to_message());
    constexpr size_t max_chars = 200;
    if (text.size() > max_chars) {
      text.resize(max_chars);
      text += "...";
    }
    spdlog::debug("actor {} dropped an unexpected message: {}", self->id(),
                  text);
  }
  // A requester gets an error at once rather than at its own timeout; any
  // other message is consumed without an answer (an error sent back to an
  // asynchronous sender would arrive as an error message and kill it).
  if (self->current_message_id().is_request())
    return caf::make_error(caf::sec::unexpected_message);
  return caf::delegated<caf::message>{};
}

} // namespace sv
