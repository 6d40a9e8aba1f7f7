#include "messages/registry.hpp"

#include "messages/errors.hpp"
#include "messages/provider.hpp"

#include <caf/actor_system_config.hpp>

namespace sv {

void register_protocol(caf::actor_system_config& cfg) {
  cfg.add_message_type<sandbox_resources>("sv::sandbox_resources");
  cfg.add_message_type<sandbox_spec>("sv::sandbox_spec");
  cfg.add_message_type<sandbox_handle>("sv::sandbox_handle");
  cfg.add_message_type<sandbox_status>("sv::sandbox_status");
  cfg.add_message_type<exec_request>("sv::exec_request");
  cfg.add_message_type<exec_result>("sv::exec_result");
  cfg.add_message_type<file_map>("sv::file_map");
  cfg.add_message_type<verification_config>("sv::verification_config");
  cfg.add_message_type<verification_request>("sv::verification_request");
  cfg.add_message_type<verification_failure>("sv::verification_failure");
  cfg.add_message_type<state_timings>("sv::state_timings");
  cfg.add_message_type<verification_outcome>("sv::verification_outcome");
  cfg.add_message_type<supervisor_stats>("sv::supervisor_stats");
  cfg.add_message_type<provider_actor>("sv::provider_actor");
  cfg.add_message_type<supervisor_actor>("sv::supervisor_actor");
  cfg.add_error_category(
    provider_error_category,
    [](uint8_t code, caf::atom_value, const caf::message& ctx) -> std::string {
      std::string out = "provider_errc::";
      out += to_string(static_cast<provider_errc>(code));
      if (ctx.match_elements<std::string>())
        out += ": " + ctx.get_as<std::string>(0);
      return out;
    });
}

} // namespace sv
