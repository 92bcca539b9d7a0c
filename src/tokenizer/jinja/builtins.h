// The global functions every template sees: Jinja2's range, namespace and dict, and the two Hugging
// Face adds for chat templates, raise_exception(message) and strftime_now(format).
#pragma once

#include "tokenizer/jinja/value.h"

namespace drift::jinja {

// Looked up after the template's own variables, so a context variable of the same name wins.
const Dict& builtin_globals();

}  // namespace drift::jinja
