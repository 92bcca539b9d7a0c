// Random schemas of the supported subset, random documents walked through a JsonMatcher, and an
// independent validator (written from the JSON Schema spec, not from the matcher) to check them.
#pragma once

#include <nlohmann/json.hpp>

#include <random>
#include <string>

#include "structured/json_matcher.h"

namespace drift::structured::testing {

using Json = nlohmann::json;

Json random_schema(std::mt19937& rng, int depth = 0);
// Walks the matcher with random allowed bytes until the document is finished (or `max_bytes`); the
// text, or empty when it did not finish.
std::string random_document(const SchemaNode* root, std::mt19937& rng, size_t max_bytes = 4000);
// Whether `value` validates against `schema` (the supported subset).
bool validates(const Json& value, const Json& schema, const Json& document);

}  // namespace drift::structured::testing
