#include "tokenizer/added_token_matcher.h"

#include <utf8proc.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace drift::tokenizer {
namespace {

// Unicode White_Space: what `\s` means in the Rust regexes Hugging Face uses for lstrip/rstrip.
bool is_whitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// `\w` in Rust regexes: letters, marks, decimal and letter numbers, connector punctuation, joiners.
bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  switch (utf8proc_category(utf8proc_int32_t(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

size_t previous_char_start(std::string_view text, size_t pos) {
  do {
    --pos;
  } while (pos > 0 && (uint8_t(text[pos]) & 0xC0) == 0x80);
  return pos;
}

char32_t code_point_before(std::string_view text, size_t pos) {
  size_t start = previous_char_start(text, pos);
  return next_code_point(text, start);
}

// Start of the whitespace run that ends at `pos`.
size_t whitespace_start_before(std::string_view text, size_t pos) {
  while (pos > 0 && is_whitespace(code_point_before(text, pos))) pos = previous_char_start(text, pos);
  return pos;
}

// End of the whitespace run that starts at `pos`.
size_t whitespace_end_after(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return pos;
}

bool stands_alone(std::string_view text, size_t begin, size_t end) {
  const bool free_before = begin == 0 || !is_word_char(code_point_before(text, begin));
  size_t after = end;
  const bool free_after = end == text.size() || !is_word_char(next_code_point(text, after));
  return free_before && free_after;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens_.size(); ++t) {
    int32_t node = 0;
    for (char c : tokens_[t].content) {
      int32_t next = child(node, uint8_t(c));
      if (next < 0) {
        next = int32_t(nodes_.size());
        nodes_[size_t(node)].children.emplace_back(uint8_t(c), next);
        nodes_.emplace_back();
      }
      node = next;
    }
    // Two tokens with the same content: the later one wins, as in a map keyed by content.
    nodes_[size_t(node)].token = int32_t(t);
    starts_token_[uint8_t(tokens_[t].content[0])] = true;
  }
}

int32_t AddedTokenMatcher::child(int32_t node, uint8_t byte) const {
  for (const auto& [b, next] : nodes_[size_t(node)].children) {
    if (b == byte) return next;
  }
  return -1;
}

const AddedToken* AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& end) const {
  const AddedToken* found = nullptr;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, uint8_t(text[i]));
    if (node < 0) break;
    if (nodes_[size_t(node)].token >= 0) {
      found = &tokens_[size_t(nodes_[size_t(node)].token)];
      end = i + 1;
    }
  }
  return found;
}

bool AddedTokenMatcher::find_from(std::string_view text, size_t from, Match& match) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (!starts_token_[uint8_t(text[pos])]) continue;
    size_t end = 0;
    if (const AddedToken* token = longest_at(text, pos, end)) {
      match = {pos, end, token};
      return true;
    }
  }
  return false;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& segments) const {
  size_t done = 0;  // end of the last segment emitted
  size_t search = 0;
  Match m{};
  while (!tokens_.empty() && find_from(text, search, m)) {
    search = m.end;
    if (m.token->single_word && !stands_alone(text, m.begin, m.end)) continue;
    if (m.token->lstrip) m.begin = std::max(whitespace_start_before(text, m.begin), done);
    if (m.token->rstrip) search = m.end = whitespace_end_after(text, m.end);
    if (m.begin > done) segments.push_back({text.substr(done, m.begin - done)});
    segments.push_back({text.substr(m.begin, m.end - m.begin), m.token->id});
    done = m.end;
  }
  if (done < text.size()) segments.push_back({text.substr(done)});
}

}  // namespace drift::tokenizer
