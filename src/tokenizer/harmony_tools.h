// Function tools as harmony declares them: a TypeScript-like `namespace functions` written from each
// tool's JSON Schema (format.md "Defining available tools"). Internal to the harmony renderer.
#pragma once

#include <span>
#include <string>

#include "drift/status.h"
#include "tokenizer/harmony.h"

namespace drift::tokenizer::harmony {

// "# Tools\n\n## functions\n\nnamespace functions {\n\n...} // namespace functions". Errors name the tool.
Expected<std::string> render_tools_section(std::span<const Tool> tools);

}  // namespace drift::tokenizer::harmony
