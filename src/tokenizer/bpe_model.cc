#include "tokenizer/bpe_model.h"

#include <fmt/format.h>

#include <limits>
#include <queue>

#include "tokenizer/byte_level.h"

namespace drift::tokenizer {
namespace {

// Enough distinct words for a long conversation; pieces longer than this are rarely repeated.
constexpr size_t kCacheCapacity = 1 << 16;
constexpr size_t kMaxCachedPieceBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

// A merge waiting in the queue; `pos` is the left symbol. Ordered so the queue yields the lowest rank,
// and among equal ranks the leftmost pair, as Hugging Face does.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t id;
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Splits one merge entry into its two tokens; nullopt when it has neither stored form. Views point into `m`.
std::optional<std::pair<std::string_view, std::string_view>> split_merge(const Json& m) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t space = s.find(' ');
    if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) return std::nullopt;
    return std::pair{std::string_view(s).substr(0, space), std::string_view(s).substr(space + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::pair{std::string_view(m[0].get_ref<const std::string&>()),
                     std::string_view(m[1].get_ref<const std::string&>())};
  }
  return std::nullopt;
}

}  // namespace

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

Expected<BpeModel> BpeModel::from_json(const JsonField& model) {
  DRIFT_ASSIGN_OR_RETURN(const std::string type, model.type());
  if (type != "BPE") {
    DRIFT_ASSIGN_OR_RETURN(const JsonField type_field, model.required("type"));
    return type_field.unsupported(fmt::format("model type '{}' is not supported (only BPE)", type));
  }
  BpeModel bpe;
  DRIFT_RETURN_IF_ERROR(bpe.read_vocab(model));
  DRIFT_RETURN_IF_ERROR(bpe.read_options(model));
  DRIFT_RETURN_IF_ERROR(bpe.read_merges(model));
  bpe.prepare_byte_symbols();
  bpe.cache_ = std::make_unique<WordCache>(kCacheCapacity);
  return bpe;
}

BpeModel BpeModel::from_tables(StringMap<int32_t> vocab, std::span<const RankedMerge> merges, bool ignore_merges) {
  BpeModel bpe;
  bpe.vocab_ = std::move(vocab);
  bpe.merges_.reserve(merges.size());
  for (const RankedMerge& m : merges) bpe.merges_[pair_key(m.left, m.right)] = {m.rank, m.id};
  bpe.ignore_merges_ = ignore_merges;
  bpe.prepare_byte_symbols();
  bpe.cache_ = std::make_unique<WordCache>(kCacheCapacity);
  return bpe;
}

Status BpeModel::read_vocab(const JsonField& model) {
  DRIFT_ASSIGN_OR_RETURN(const JsonField vocab, model.required("vocab"));
  if (!vocab.json().is_object())
    return vocab.invalid(fmt::format("expected an object, got {}", vocab.json().type_name()));
  vocab_.reserve(vocab.json().size());
  for (const auto& [token, id] : vocab.json().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= std::numeric_limits<int32_t>::max()) {
      return vocab.invalid(fmt::format("token '{}' has id {}, expected an integer in [0, 2^31-1)", token, id.dump()));
    }
    vocab_.emplace(token, int32_t(id.get<int64_t>()));
  }
  return Status::Ok();
}

Status BpeModel::read_options(const JsonField& model) {
  if (const auto dropout = model.optional("dropout");
      dropout && !(dropout->json().is_number() && dropout->json().get<double>() == 0.0)) {
    return dropout->unsupported(
        fmt::format("BPE dropout {} is not supported (only null or 0)", dropout->json().dump()));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto affix = model.optional(key);
    if (affix && !(affix->json().is_string() && affix->json().get_ref<const std::string&>().empty())) {
      return affix->unsupported(fmt::format("{} is not supported with byte-level BPE", affix->json().dump()));
    }
  }
  DRIFT_ASSIGN_OR_RETURN(fuse_unk_, model.bool_member("fuse_unk", false));
  DRIFT_ASSIGN_OR_RETURN(byte_fallback_, model.bool_member("byte_fallback", false));
  DRIFT_ASSIGN_OR_RETURN(ignore_merges_, model.bool_member("ignore_merges", false));
  if (const auto unk = model.optional("unk_token")) {
    DRIFT_ASSIGN_OR_RETURN(const std::string unk_token, unk->as_string());
    const auto it = vocab_.find(unk_token);
    if (it == vocab_.end()) return unk->invalid(fmt::format("unk_token '{}' is not in model.vocab", unk_token));
    unk_id_ = it->second;
  }
  return Status::Ok();
}

Status BpeModel::read_merges(const JsonField& model) {
  DRIFT_ASSIGN_OR_RETURN(const JsonField merges, model.required("merges"));
  if (!merges.json().is_array())
    return merges.invalid(fmt::format("expected an array, got {}", merges.json().type_name()));
  merges_.reserve(merges.json().size());
  std::string joined;
  int32_t rank = 0;
  // Hot for real vocabularies (~300k merges): field paths are only built for an error.
  for (size_t i = 0; i < merges.json().size(); ++i) {
    const Json& m = merges.json()[i];
    // A "#version" line copied from merges.txt is not a merge and takes no rank, as in Hugging Face.
    if (m.is_string() && m.get_ref<const std::string&>().starts_with("#version")) continue;
    const auto pair = split_merge(m);
    if (!pair) {
      return merges.element(i).invalid(
          fmt::format("expected \"left right\" (one space) or [\"left\", \"right\"], got {}", m.dump()));
    }
    joined.assign(pair->first).append(pair->second);
    const auto left = vocab_.find(pair->first);
    const auto right = vocab_.find(pair->second);
    const auto result = vocab_.find(joined);
    if (left == vocab_.end() || right == vocab_.end() || result == vocab_.end()) {
      const std::string_view missing = left == vocab_.end()    ? pair->first
                                       : right == vocab_.end() ? pair->second
                                                               : std::string_view(joined);
      return merges.element(i).invalid(fmt::format("token '{}' is not in model.vocab", missing));
    }
    // A pair listed twice keeps its last rank, as Hugging Face's loader does.
    merges_[pair_key(left->second, right->second)] = {rank++, result->second};
  }
  return Status::Ok();
}

void BpeModel::prepare_byte_symbols() {
  for (int b = 0; b < 256; ++b) {
    const std::string_view visible = byte_to_visible(uint8_t(b));
    if (const auto it = vocab_.find(visible); it != vocab_.end()) {
      byte_symbols_[size_t(b)] = {it->second};
      continue;
    }
    if (!byte_fallback_) continue;
    // Hugging Face falls back on the UTF-8 bytes of the character it looked up, i.e. the visible form.
    std::vector<int32_t> fallback;
    for (char c : visible) {
      const auto it = vocab_.find(fmt::format("<0x{:02X}>", uint8_t(c)));
      if (it == vocab_.end()) break;
      fallback.push_back(it->second);
    }
    if (fallback.size() == visible.size()) byte_symbols_[size_t(b)] = std::move(fallback);
  }
}

std::optional<BpeModel::MergeResult> BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  if (it == merges_.end()) return std::nullopt;
  return it->second;
}

void BpeModel::merge(std::vector<Symbol>& symbols) const {
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto m = find_merge(symbols[i].id, symbols[i + 1].id)) queue.push({m->rank, int32_t(i), m->id});
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    // The pair may have changed since this candidate was queued; then a fresher candidate covers it.
    const auto current = find_merge(left.id, right.id);
    if (!current || current->id != top.id) continue;
    left.id = top.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[size_t(left.next)].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto m = find_merge(symbols[size_t(left.prev)].id, left.id)) queue.push({m->rank, left.prev, m->id});
    }
    if (left.next >= 0) {
      if (const auto m = find_merge(left.id, symbols[size_t(left.next)].id)) queue.push({m->rank, top.pos, m->id});
    }
  }
}

void BpeModel::merge_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  bool last_was_unk = false;
  for (char c : piece) {
    const std::vector<int32_t>& start = byte_symbols_[uint8_t(c)];
    if (start.empty()) {
      // A byte the vocabulary cannot spell: <unk> when there is one (runs fused if asked), else dropped.
      if (unk_id_ && !(fuse_unk_ && last_was_unk)) symbols.push_back({*unk_id_, 0, 0, true});
      last_was_unk = unk_id_.has_value();
      continue;
    }
    last_was_unk = false;
    for (int32_t id : start) symbols.push_back({id, 0, 0, true});
  }
  for (size_t i = 0; i < symbols.size(); ++i) {
    symbols[i].prev = int32_t(i) - 1;
    symbols[i].next = i + 1 < symbols.size() ? int32_t(i + 1) : -1;
  }
  merge(symbols);
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
}

bool BpeModel::take_whole(std::string_view piece, std::vector<int32_t>& ids) const {
  std::string visible;
  append_visible(piece, visible);
  const auto it = vocab_.find(visible);
  if (it == vocab_.end()) return false;
  ids.push_back(it->second);
  return true;
}

void BpeModel::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable && cache_->lookup(piece, ids)) return;
  const size_t first = ids.size();
  // ignore_merges (Llama-3): a pre-token that is itself a vocabulary entry is taken whole, whatever the merges say.
  if (!(ignore_merges_ && take_whole(piece, ids))) merge_piece(piece, ids);
  if (cacheable) cache_->insert(piece, std::span(ids).subspan(first));
}

}  // namespace drift::tokenizer
