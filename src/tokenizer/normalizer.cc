#include "tokenizer/normalizer.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <cstdlib>

namespace drift::tokenizer {
namespace {

// Every code point below U+0300 is NFC_Quick_Check=Yes with combining class 0, so text without a byte of
// 0xCC or more (the first lead byte past U+02FF) is already NFC. That covers ASCII and most Latin text.
bool surely_nfc(std::string_view text) {
  for (char c : text) {
    if (uint8_t(c) >= 0xCC) return false;
  }
  return true;
}

Status check_supported(const JsonField& field, bool& nfc) {
  DRIFT_ASSIGN_OR_RETURN(const std::string type, field.type());
  if (type == "NFC") {
    nfc = true;
    return Status::Ok();
  }
  if (type == "Sequence") {
    DRIFT_ASSIGN_OR_RETURN(const JsonField steps, field.required("normalizers"));
    if (!steps.json().is_array()) return steps.invalid("expected an array");
    for (size_t i = 0; i < steps.json().size(); ++i) DRIFT_RETURN_IF_ERROR(check_supported(steps.element(i), nfc));
    return Status::Ok();
  }
  return field.unsupported(
      fmt::format("normalizer type '{}' is not supported (only NFC, alone or in a Sequence)", type));
}

}  // namespace

Expected<Normalizer> Normalizer::from_json(const JsonField& root) {
  Normalizer n;
  if (const auto field = root.optional("normalizer")) DRIFT_RETURN_IF_ERROR(check_supported(*field, n.nfc_));
  return n;
}

std::string_view Normalizer::apply(std::string_view text, std::string& storage) const {
  if (!nfc_ || surely_nfc(text)) return text;
  utf8proc_uint8_t* composed = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), utf8proc_ssize_t(text.size()), &composed,
                   utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  // utf8proc only fails on invalid UTF-8 or out of memory; the text was checked, so keep it as it is.
  if (n < 0) return text;
  storage.assign(reinterpret_cast<const char*>(composed), size_t(n));
  std::free(composed);
  return storage;
}

}  // namespace drift::tokenizer
