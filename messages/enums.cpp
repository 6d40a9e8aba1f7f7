#include "messages/enums.hpp"

#include <array>

namespace sv {

namespace {

template <size_t N>
using name_table = std::array<std::string_view, N>;

constexpr name_table<5> sandbox_status_names{"starting", "running", "stopped",
                                             "error", "unknown"};
constexpr name_table<6> exec_error_type_names{"none",   "timeout", "oom",
                                              "killed", "runtime", "sandbox"};
constexpr name_table<3> failure_kind_names{"provider_unavailable",
                                           "verifier_error", "invalid_request"};
constexpr name_table<9> verification_state_names{"validate", "queue",  "create",
                                                 "ready",    "upload", "exec",
                                                 "download", "parse",  "stop"};
constexpr name_table<9> failure_cause_names{
  "error",      "timeout", "crash",  "invalid_result", "node_down",
  "overloaded", "oom",     "killed", "invalid_request"};

template <class Enum, size_t N>
std::string_view name_of(const name_table<N>& names, Enum x) {
  auto i = static_cast<size_t>(x);
  return i < N ? names[i] : std::string_view{"?"};
}

template <class Enum, size_t N>
bool parse(const name_table<N>& names, std::string_view name, Enum& x) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) {
      x = static_cast<Enum>(i);
      return true;
    }
  }
  return false;
}

template <size_t N>
std::string join(const name_table<N>& names) {
  std::string out;
  for (auto name : names) {
    if (!out.empty())
      out += ", ";
    out += name;
  }
  return out;
}

} // namespace

#define SV_ENUM_NAMES(type)                                                    \
  std::string_view to_string(type x) {                                         \
    return name_of(type##_names, x);                                           \
  }                                                                            \
  bool from_string(std::string_view name, type& x) {                           \
    return parse(type##_names, name, x);                                       \
  }                                                                            \
  bool is_valid(type x) {                                                      \
    return static_cast<size_t>(x) < type##_names.size();                       \
  }                                                                            \
  template <>                                                                  \
  std::string allowed_names<type>() {                                          \
    return join(type##_names);                                                 \
  }

SV_ENUM_NAMES(sandbox_status)
SV_ENUM_NAMES(exec_error_type)
SV_ENUM_NAMES(failure_kind)
SV_ENUM_NAMES(verification_state)
SV_ENUM_NAMES(failure_cause)

#undef SV_ENUM_NAMES

} // namespace sv
