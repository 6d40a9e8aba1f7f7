#pragma once

// sv-grade's names for the batch format, which lives in
// messages/batch_format.hpp (shared with sv-serve).

#include "messages/batch_format.hpp"

namespace sv::grade {

using sv::batch_entry;
using sv::make_failed_outcome;
using sv::output_line_parts;
using sv::parse_batch_line;
using sv::parse_reason;
using sv::parse_result_text;
using sv::parsed_line;
using sv::render_output_line;
using sv::render_output_parts;
using sv::reply_timeout;

} // namespace sv::grade
