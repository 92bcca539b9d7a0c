#include "structured/token_mask.h"

#include <algorithm>
#include <map>

namespace drift::structured {

namespace {

// Text a string may hold as it is, whatever came before: no quote, backslash or control byte, and whole
// UTF-8 characters only (a token that splits one is walked through the matcher instead).
bool plain_string_text(std::string_view bytes) {
  for (char c : bytes)
    if (c == '"' || c == '\\' || uint8_t(c) < 0x20) return false;
  return is_complete_utf8(bytes);
}

int32_t characters(std::string_view bytes) {
  int32_t n = 0;
  for (char c : bytes) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

void set_bit(std::span<uint32_t> mask, int32_t id) { mask[size_t(id) / 32] |= uint32_t(1) << (id % 32); }

}  // namespace

void VocabIndex::Trie::build(const std::vector<std::pair<std::string_view, int32_t>>& entries) {
  // A map-based trie first, then flattened so each node's children and tokens are contiguous.
  struct Building {
    std::map<uint8_t, size_t> children;
    std::vector<int32_t> tokens;
  };
  std::vector<Building> b(1);
  for (const auto& [bytes, id] : entries) {
    size_t node = 0;
    for (char c : bytes) {
      auto [it, added] = b[node].children.try_emplace(uint8_t(c), b.size());
      if (added) b.emplace_back();
      node = it->second;
    }
    b[node].tokens.push_back(id);
    max_depth = std::max(max_depth, bytes.size());
  }
  nodes.assign(b.size(), Node{});
  for (size_t i = 0; i < b.size(); ++i) {
    nodes[i].edge_begin = uint32_t(edges.size());
    for (const auto& [byte, child] : b[i].children) edges.push_back({byte, uint32_t(child)});
    nodes[i].edge_end = uint32_t(edges.size());
    nodes[i].token_begin = uint32_t(tokens.size());
    tokens.insert(tokens.end(), b[i].tokens.begin(), b[i].tokens.end());
    nodes[i].token_end = uint32_t(tokens.size());
  }
}

VocabIndex::VocabIndex(const tokenizer::Tokenizer& tokenizer, int32_t vocab_size) : vocab_size_(vocab_size) {
  std::vector<std::pair<std::string_view, int32_t>> tokens;
  const int32_t known = std::min(vocab_size, tokenizer.vocab_size());
  for (int32_t id = 0; id < known; ++id)
    if (!tokenizer.is_special(id)) tokens.emplace_back(tokenizer.token_bytes(id), id);
  index(tokens);
}

VocabIndex::VocabIndex(const std::vector<std::string>& token_bytes, int32_t vocab_size) : vocab_size_(vocab_size) {
  std::vector<std::pair<std::string_view, int32_t>> tokens;
  for (size_t id = 0; id < token_bytes.size() && int32_t(id) < vocab_size; ++id) tokens.emplace_back(token_bytes[id], int32_t(id));
  index(tokens);
}

void VocabIndex::index(const std::vector<std::pair<std::string_view, int32_t>>& tokens) {
  std::vector<std::pair<std::string_view, int32_t>> all, special;
  std::vector<std::pair<int32_t, int32_t>> plain;  // (characters, id)
  int32_t longest = 0;
  for (const auto& [bytes, id] : tokens) {
    if (bytes.empty()) continue;
    all.emplace_back(bytes, id);
    if (plain_string_text(bytes)) {
      plain.emplace_back(characters(bytes), id);
      longest = std::max(longest, plain.back().first);
    } else {
      special.emplace_back(bytes, id);
    }
  }
  all_.build(all);
  special_.build(special);
  plain_upto_.assign(size_t(longest) + 1, std::vector<uint32_t>(size_t(words()), 0u));
  for (const auto& [chars, id] : plain) set_bit(plain_upto_[size_t(chars)], id);
  for (size_t k = 1; k < plain_upto_.size(); ++k)
    for (size_t w = 0; w < plain_upto_[k].size(); ++w) plain_upto_[k][w] |= plain_upto_[k - 1][w];
}

void VocabIndex::walk(const Trie& trie, const JsonMatcher& start, std::span<uint32_t> mask, Scratch& scratch) const {
  std::vector<JsonMatcher>& matchers = scratch.matchers;
  if (matchers.size() < trie.max_depth + 1) matchers.assign(trie.max_depth + 1, start);
  matchers[0] = start;
  // An explicit stack (node, depth, next edge) so deep tokens cost no recursion.
  std::vector<Scratch::Visit>& stack = scratch.visits;
  stack.assign(1, Scratch::Visit{0, 0, trie.nodes[0].edge_begin});
  while (!stack.empty()) {
    Scratch::Visit& v = stack.back();
    if (v.edge == trie.nodes[v.node].edge_end) {
      stack.pop_back();
      continue;
    }
    const Trie::Edge e = trie.edges[v.edge++];
    JsonMatcher& next = matchers[v.depth + 1];
    next = matchers[v.depth];
    if (!next.advance(e.byte)) continue;
    const Trie::Node& child = trie.nodes[e.child];
    for (uint32_t t = child.token_begin; t < child.token_end; ++t) set_bit(mask, trie.tokens[t]);
    stack.push_back({e.child, v.depth + 1, child.edge_begin});
  }
}

void VocabIndex::allowed(const JsonMatcher& matcher, std::span<const int32_t> stop_ids, std::span<uint32_t> mask,
                         Scratch& scratch) const {
  std::fill(mask.begin(), mask.end(), 0u);
  if (matcher.in_plain_string()) {
    const int64_t room = matcher.string_room();
    const size_t upto = room < 0 ? plain_upto_.size() - 1 : size_t(std::min<int64_t>(room, int64_t(plain_upto_.size()) - 1));
    std::copy(plain_upto_[upto].begin(), plain_upto_[upto].end(), mask.begin());
    walk(special_, matcher, mask, scratch);
  } else {
    walk(all_, matcher, mask, scratch);
  }
  if (matcher.can_end())
    for (int32_t id : stop_ids)
      if (id >= 0 && id < vocab_size_) set_bit(mask, id);
}

}  // namespace drift::structured
