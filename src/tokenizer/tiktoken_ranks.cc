#include "tokenizer/tiktoken_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "base/mapped_file.h"

namespace drift::tokenizer {
namespace {

// The value of one standard-alphabet base64 digit, or -1.
int base64_digit(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

// Strict standard base64 with padding, the only form tiktoken files use.
std::optional<std::string> decode_base64(std::string_view text) {
  if (text.empty() || text.size() % 4 != 0) return std::nullopt;
  const size_t padding = text.ends_with("==") ? 2 : text.ends_with('=') ? 1 : 0;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int num_bits = 0;
  for (size_t i = 0; i < text.size() - padding; ++i) {
    const int digit = base64_digit(text[i]);
    if (digit < 0) return std::nullopt;
    bits = (bits << 6) | uint32_t(digit);
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      out.push_back(char((bits >> num_bits) & 0xFF));
    }
  }
  // Leftover bits past the last whole byte must be zero, or two spellings would decode alike.
  if ((bits & ((1u << num_bits) - 1)) != 0) return std::nullopt;
  return out;
}

std::optional<int64_t> parse_rank(std::string_view text) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    parts.push_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return parts;
    begin = end + 1;
  }
}

std::string_view trim_line_end(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  return line;
}

// Collects tokens with their ranks. A token given twice is caught as it comes; finish() then checks that no
// rank is given twice and that the ranks are dense enough for a table indexed by rank.
class RankCollector {
 public:
  RankCollector(std::string_view source, size_t expected_count) : source_(source) {
    ranks_.rank_of.reserve(expected_count);
  }

  // The problem with one token, if any; the caller says where it is (formatted only on failure, since
  // real files hold 200k tokens).
  std::optional<std::string> add(std::string_view base64, int64_t rank) {
    std::optional<std::string> bytes = decode_base64(base64);
    if (!bytes) return fmt::format("'{}' is not base64", base64);
    if (rank >= std::numeric_limits<int32_t>::max()) return fmt::format("rank {} is too large", rank);
    const auto [it, inserted] = ranks_.rank_of.emplace(std::move(*bytes), int32_t(rank));
    if (!inserted) return fmt::format("token '{}' has ranks {} and {}", base64, it->second, rank);
    max_rank_ = std::max(max_rank_, rank);
    return std::nullopt;
  }

  Expected<TiktokenRanks> finish() && {
    if (ranks_.rank_of.empty()) return invalid_argument(fmt::format("{}: no tokens", source_));
    const size_t count = ranks_.rank_of.size();
    if (size_t(max_rank_) >= 2 * count + 1024) {
      return invalid_argument(fmt::format("{}: {} tokens but ranks go up to {}", source_, count, max_rank_));
    }
    ranks_.by_rank.resize(size_t(max_rank_ + 1));
    for (const auto& [bytes, rank] : ranks_.rank_of) {
      std::string& slot = ranks_.by_rank[size_t(rank)];
      if (!slot.empty()) return invalid_argument(fmt::format("{}: rank {} is given to two tokens", source_, rank));
      slot = bytes;
    }
    return std::move(ranks_);
  }

 private:
  std::string_view source_;
  TiktokenRanks ranks_;
  int64_t max_rank_ = -1;
};

// OpenAI's `.tiktoken`: "<base64 bytes> <rank>" per line.
Expected<TiktokenRanks> parse_lines(std::string_view contents, std::string_view source) {
  const std::vector<std::string_view> lines = split(contents, '\n');
  RankCollector collector(source, lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = trim_line_end(lines[i]);
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = split(line, ' ');
    const std::optional<int64_t> rank = fields.size() == 2 ? parse_rank(fields[1]) : std::nullopt;
    if (!rank) {
      return invalid_argument(fmt::format("{}: line {}: expected '<base64> <rank>', got '{}'", source, i + 1, line));
    }
    if (const auto problem = collector.add(fields[0], *rank))
      return invalid_argument(fmt::format("{}: line {}: {}", source, i + 1, *problem));
  }
  return std::move(collector).finish();
}

// The npm package's JSON: "bpe_ranks" lines of "<label> <first rank> <base64> <base64> ...".
Expected<TiktokenRanks> parse_npm_json(std::string_view contents, std::string_view source) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(contents);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(fmt::format("{}: invalid JSON: {}", source, e.what()));
  }
  if (!root.is_object() || !root.contains("bpe_ranks") || !root["bpe_ranks"].is_string()) {
    return invalid_argument(fmt::format("{}: expected an object with a string \"bpe_ranks\"", source));
  }
  const std::string& bpe_ranks = root["bpe_ranks"].get_ref<const std::string&>();
  RankCollector collector(source, size_t(std::count(bpe_ranks.begin(), bpe_ranks.end(), ' ')));
  const std::vector<std::string_view> lines = split(bpe_ranks, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string_view line = trim_line_end(lines[i]);
    if (line.empty()) continue;
    const std::vector<std::string_view> fields = split(line, ' ');
    const std::optional<int64_t> first = fields.size() >= 2 ? parse_rank(fields[1]) : std::nullopt;
    if (!first) {
      return invalid_argument(
          fmt::format("{}: bpe_ranks line {}: expected '<label> <first rank> <base64>...'", source, i + 1));
    }
    for (size_t k = 2; k < fields.size(); ++k) {
      if (const auto problem = collector.add(fields[k], *first + int64_t(k - 2)))
        return invalid_argument(fmt::format("{}: bpe_ranks line {} token {}: {}", source, i + 1, k - 2, *problem));
    }
  }
  return std::move(collector).finish();
}

}  // namespace

Expected<TiktokenRanks> parse_tiktoken_ranks(std::string_view contents, std::string_view source) {
  const size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && contents[first] == '{') return parse_npm_json(contents, source);
  return parse_lines(contents, source);
}

Expected<TiktokenRanks> read_tiktoken_ranks(const std::string& path) {
  DRIFT_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::open(path));
  const std::span<const std::byte> bytes = file.bytes();
  return parse_tiktoken_ranks(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), path);
}

}  // namespace drift::tokenizer
