#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

namespace drift::tokenizer {

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

namespace {

// One ovector pair is enough: splits need only the whole match. Kept per thread so that matching
// allocates nothing and a shared Regex stays read-only.
class ThreadMatchData {
 public:
  ThreadMatchData() : data_(pcre2_match_data_create(1, nullptr)) {}
  ~ThreadMatchData() { pcre2_match_data_free(data_); }
  ThreadMatchData(const ThreadMatchData&) = delete;
  ThreadMatchData& operator=(const ThreadMatchData&) = delete;
  pcre2_match_data* get() const { return data_; }

 private:
  pcre2_match_data* data_;
};

pcre2_match_data* thread_match_data() {
  thread_local ThreadMatchData data;
  return data.get();
}

std::string pcre2_message(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return n < 0 ? fmt::format("PCRE2 error {}", error_code)
               : std::string(reinterpret_cast<const char*>(buffer), size_t(n));
}

// Runs one match from `start`; falls back to the interpreter when the JIT stack is too small for this
// subject (long runs of whitespace against `\s+(?!\S)`), which only costs speed.
int match_at(pcre2_code* code, std::string_view subject, size_t start, pcre2_match_data* md) {
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  int rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
    rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
  return rc;
}

size_t next_char_boundary(std::string_view s, size_t pos) {
  ++pos;
  while (pos < s.size() && (uint8_t(s[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace

Regex::Regex(std::unique_ptr<Compiled> compiled) : compiled_(std::move(compiled)) {}
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Expected<Regex> Regex::compile(std::string_view pattern) { return compile_with(pattern, PCRE2_UCP); }

// PCRE2 refuses PCRE2_UCP beside PCRE2_LITERAL; a literal has no character classes for it to affect.
Expected<Regex> Regex::compile_literal(std::string_view literal) { return compile_with(literal, PCRE2_LITERAL); }

Expected<Regex> Regex::compile_with(std::string_view pattern, uint32_t extra_options) {
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | extra_options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument(fmt::format("{} at offset {} of /{}/", pcre2_message(error_code), error_offset, pattern));
  }
  auto compiled = std::make_unique<Compiled>();
  compiled->code = code;
  // JIT is an optimisation: where it is unavailable pcre2_match interprets the pattern instead.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Regex(std::move(compiled));
}

void Regex::find_all(std::string_view subject, std::vector<MatchSpan>& matches) const {
  pcre2_match_data* md = thread_match_data();
  size_t start = 0;
  while (start < subject.size()) {
    if (match_at(compiled_->code, subject, start, md) < 0) return;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(md);
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end > begin) {
      matches.push_back({begin, end});
      start = end;
    } else {
      start = next_char_boundary(subject, begin);
    }
  }
}

}  // namespace drift::tokenizer
