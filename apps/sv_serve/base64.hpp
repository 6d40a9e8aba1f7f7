#pragma once

// base64 lives in messages/ (files carry bytes as {"base64": "..."}); the
// compatible routes use it under their own namespace.

#include "messages/detail/base64.hpp"

namespace sv::serve {

using sv::base64_decode;
using sv::base64_encode;

} // namespace sv::serve
