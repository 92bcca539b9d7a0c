// Reading into values: x.attr, x[key], x[a:b:c], iteration and len(), with Jinja2's lenient rules: a
// missing key, attribute or index is an undefined value, never an error, and attributes of an
// undefined value are undefined too (so `a.b.c is defined` works whatever `a` is).
#pragma once

#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/jinja/value.h"

namespace drift::jinja {

// x.attr: like Python's getattr-then-getitem, a method name ("items", "strip" ...) yields the bound
// method, so `{{ d.items() }}` calls dict.items even when `d` has a key "items" (use d['items']).
Value get_attribute(const Value& object, std::string_view attribute);
// x[key]: item first; negative indices count from the end; strings index by code point.
Value get_item(const Value& object, const Value& key);
// x[start:stop:step] on strings, lists and tuples with Python's clamping; a zero step is an error.
Expected<Value> get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);
// The dotted paths filters take (`attribute="function.name"`, `"items.0"`), one get_item per part.
Value get_path(const Value& object, std::string_view dotted_path);

// for-loop order: list items, dict keys, string characters; an undefined value yields nothing.
Expected<std::vector<Value>> iterate(const Value& value);
// len(): code points for strings; 0 for undefined.
Expected<int64_t> length_of(const Value& value);

}  // namespace drift::jinja
