// A compiled PCRE2 pattern for pre-tokenizer splits: UTF-8 with Unicode properties (\p{L}, \s), JIT-compiled
// when the platform allows. Shared read-only between threads; each thread brings its own match state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"

namespace drift::tokenizer {

struct MatchSpan {
  size_t begin = 0;
  size_t end = 0;
};

class Regex {
 public:
  // The error names PCRE2's complaint and the offset in the pattern.
  static Expected<Regex> compile(std::string_view pattern);
  // Matches `literal` exactly (a Split with a "String" pattern).
  static Expected<Regex> compile_literal(std::string_view literal);

  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  ~Regex();

  // Appends the non-empty, non-overlapping matches in `subject`, left to right. `subject` must be valid
  // UTF-8 (callers check once, so matching skips PCRE2's own check). A match that fails for a reason
  // other than "no match" (a resource limit on a pathological input) ends the search there.
  void find_all(std::string_view subject, std::vector<MatchSpan>& matches) const;

 private:
  struct Compiled;
  explicit Regex(std::unique_ptr<Compiled> compiled);
  static Expected<Regex> compile_with(std::string_view pattern, uint32_t extra_options);

  std::unique_ptr<Compiled> compiled_;
};

}  // namespace drift::tokenizer
