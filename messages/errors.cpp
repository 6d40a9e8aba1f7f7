#include "messages/errors.hpp"

#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace sv {

std::string_view to_string(provider_errc x) {
  switch (x) {
  case provider_errc::unavailable:
    return "unavailable";
  case provider_errc::no_such_sandbox:
    return "no_such_sandbox";
  case provider_errc::invalid_argument:
    return "invalid_argument";
  case provider_errc::invalid_path:
    return "invalid_path";
  case provider_errc::not_found:
    return "not_found";
  case provider_errc::not_regular_file:
    return "not_regular_file";
  case provider_errc::too_large:
    return "too_large";
  case provider_errc::io_error:
    return "io_error";
  case provider_errc::sandbox_error:
    return "sandbox_error";
  }
  return "?";
}

caf::error make_error(provider_errc code, std::string message) {
  return caf::error{static_cast<uint8_t>(code), provider_error_category,
                    caf::make_message(std::move(message))};
}

uint8_t provider_error_code(const caf::error& err) {
  return err.category() == provider_error_category ? err.code() : 0;
}

std::string describe(const caf::error& err) {
  if (!err)
    return "no error";
  const auto& ctx = err.context();
  if (err.category() == provider_error_category) {
    if (ctx.match_elements<std::string>())
      return ctx.get_as<std::string>(0);
    return std::string{to_string(static_cast<provider_errc>(err.code()))};
  }
  if (err.category() == caf::atom("system"))
    return to_string(static_cast<caf::sec>(err.code()));
  return to_string(err);
}

} // namespace sv
