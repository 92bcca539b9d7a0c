#include "tokenizer/pre_tokenizer.h"

#include <fmt/format.h>

namespace drift::tokenizer {
namespace {

// What Hugging Face's ByteLevel splits with when use_regex is true (GPT-2's pattern).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Behavior "Isolated": every match is a piece of its own, and so is each stretch between matches.
void split_isolated(const Regex& regex, std::string_view text, std::vector<std::string_view>& out) {
  std::vector<MatchSpan> matches;
  regex.find_all(text, matches);
  size_t done = 0;
  for (const MatchSpan& m : matches) {
    if (m.begin > done) out.push_back(text.substr(done, m.begin - done));
    out.push_back(text.substr(m.begin, m.end - m.begin));
    done = m.end;
  }
  if (done < text.size()) out.push_back(text.substr(done));
}

Expected<Regex> compile_field(const JsonField& field, bool literal) {
  DRIFT_ASSIGN_OR_RETURN(const std::string pattern, field.as_string());
  Expected<Regex> regex = literal ? Regex::compile_literal(pattern) : Regex::compile(pattern);
  if (!regex.ok()) return field.invalid(regex.status().message());
  return regex;
}

}  // namespace

Expected<PreTokenizer::Step> PreTokenizer::read_split(const JsonField& field) {
  DRIFT_ASSIGN_OR_RETURN(const JsonField behavior, field.required("behavior"));
  DRIFT_ASSIGN_OR_RETURN(const std::string behavior_name, behavior.as_string());
  if (behavior_name != "Isolated") {
    return behavior.unsupported(fmt::format("Split behavior '{}' is not supported (only Isolated)", behavior_name));
  }
  DRIFT_ASSIGN_OR_RETURN(const bool invert, field.bool_member("invert", false));
  if (invert) return field.unsupported("Split with invert=true is not supported");
  DRIFT_ASSIGN_OR_RETURN(const JsonField pattern, field.required("pattern"));
  Step step;
  if (const auto regex = pattern.optional("Regex")) {
    DRIFT_ASSIGN_OR_RETURN(step.regex, compile_field(*regex, /*literal=*/false));
  } else if (const auto literal = pattern.optional("String")) {
    DRIFT_ASSIGN_OR_RETURN(step.regex, compile_field(*literal, /*literal=*/true));
  } else {
    return pattern.invalid("expected {\"Regex\": ...} or {\"String\": ...}");
  }
  return step;
}

Expected<PreTokenizer::Step> PreTokenizer::read_byte_level(const JsonField& field) {
  Step step;
  step.byte_level = true;
  DRIFT_ASSIGN_OR_RETURN(step.add_prefix_space, field.bool_member("add_prefix_space", true));
  DRIFT_ASSIGN_OR_RETURN(const bool use_regex, field.bool_member("use_regex", true));
  if (use_regex) {
    Expected<Regex> regex = Regex::compile(kGpt2Pattern);
    if (!regex.ok()) return field.invalid(regex.status().message());
    step.regex = std::move(regex).value();
  }
  return step;
}

Expected<PreTokenizer::Step> PreTokenizer::read_step(const JsonField& field) {
  DRIFT_ASSIGN_OR_RETURN(const std::string type, field.type());
  if (type == "Split") return read_split(field);
  if (type == "ByteLevel") return read_byte_level(field);
  DRIFT_ASSIGN_OR_RETURN(const JsonField type_field, field.required("type"));
  return type_field.unsupported(
      fmt::format("pre-tokenizer type '{}' is not supported (only Split and ByteLevel)", type));
}

Expected<PreTokenizer> PreTokenizer::from_json(const JsonField& root) {
  const std::optional<JsonField> field = root.optional("pre_tokenizer");
  if (!field) return root.unsupported("pre_tokenizer is null; byte-level BPE needs a ByteLevel pre-tokenizer");
  PreTokenizer pre;
  DRIFT_ASSIGN_OR_RETURN(const std::string type, field->type());
  if (type == "Sequence") {
    DRIFT_ASSIGN_OR_RETURN(const JsonField steps, field->required("pretokenizers"));
    if (!steps.json().is_array())
      return steps.invalid(fmt::format("expected an array, got {}", steps.json().type_name()));
    for (size_t i = 0; i < steps.json().size(); ++i) {
      DRIFT_ASSIGN_OR_RETURN(Step step, read_step(steps.element(i)));
      pre.steps_.push_back(std::move(step));
    }
  } else {
    DRIFT_ASSIGN_OR_RETURN(Step step, read_step(*field));
    pre.steps_.push_back(std::move(step));
  }
  // ByteLevel turns bytes into the visible alphabet; a Split after it would see that alphabet instead of
  // the text, so only splits before one final ByteLevel are supported.
  for (size_t i = 0; i < pre.steps_.size(); ++i) {
    if (pre.steps_[i].byte_level != (i + 1 == pre.steps_.size())) {
      return field->unsupported("expected Split steps followed by exactly one ByteLevel step (byte-level BPE)");
    }
  }
  return pre;
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& pieces,
                         std::deque<std::string>& storage) const {
  std::vector<std::string_view> current;
  std::vector<std::string_view> next;
  if (!text.empty()) current.push_back(text);
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : current) {
      if (step.add_prefix_space && piece.front() != ' ') {
        std::string& spaced = storage.emplace_back(1, ' ');
        spaced.append(piece);
        piece = spaced;
      }
      if (step.regex) {
        split_isolated(*step.regex, piece, next);
      } else {
        next.push_back(piece);
      }
    }
    current.swap(next);
  }
  pieces.insert(pieces.end(), current.begin(), current.end());
}

}  // namespace drift::tokenizer
