// Copies of a fixture model for tests: chosen tensors overwritten (with NaN for bad-input tests, or with
// chosen values), fields of its JSON files (config.json, generation_config.json) replaced by a merge patch
// per file, a chat template or harmony's tokens added. Each copy lives in a fresh folder under the system
// temp directory, removed at exit.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace drift::testing {

using JsonPatches = std::map<std::string, nlohmann::json>;  // file name -> RFC 7386 merge patch

// A new empty folder under the system temp directory, named after `prefix`, removed at exit.
std::string fresh_temp_dir(const std::string& prefix);

std::string copy_model(const std::string& model_dir, const std::vector<std::string>& nan_tensors,
                       const JsonPatches& patches = {});
// A copy with `chat_template` written to chat_template.jinja (which wins over tokenizer_config.json's).
std::string copy_model_with_template(const std::string& model_dir, const std::string& chat_template);
// A copy whose tokenizer.json also has harmony's special tokens (<|start|>, <|end|>, <|message|>,
// <|channel|>, <|constrain|>, <|return|>, <|call|>) at ids the model's vocabulary leaves free after the
// tokenizer's own: the tiny gpt_oss fixture made a GPT-OSS folder that speaks harmony. `patches` as for
// copy_model.
std::string copy_model_with_harmony_tokens(const std::string& model_dir, const JsonPatches& patches = {});

// Replaces the values of a bf16 tensor of the model folder `model_dir` (a copy): `value(row, column)` for
// a 2-D tensor [rows, columns].
void fill_bf16_matrix(const std::string& model_dir, const std::string& tensor,
                      const std::function<float(int64_t row, int64_t column)>& value);

// Rewrites every 2-D floating-point tensor of the folder `model_dir` (a copy) whose name `pick` accepts as
// block-scaled FP8, the format DeepSeek-V3 ships: F8E4M3 codes and "<name>_scale_inv" (fp32, one scale per
// block_rows x block_cols tile, the tile's largest magnitude / 448). With `decoded`, the tensor becomes
// instead the fp32 values those codes and scales stand for (code * scale), so that a model loaded from
// either holds the same weights.
void quantize_fp8_blocks(const std::string& model_dir, const std::function<bool(const std::string&)>& pick,
                         int64_t block_rows, int64_t block_cols, bool decoded);

}  // namespace drift::testing
