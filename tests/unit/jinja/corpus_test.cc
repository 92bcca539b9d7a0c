// Oracle parity: every corpus template x conversation x add_generation_prompt renders byte for byte
// as @huggingface/jinja rendered it into expected/ (oracle/render.mjs wrote those files;
// check_oracle.sh re-runs the oracle and diffs). A pair the oracle rejected with raise_exception must
// fail here with the same message.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/jinja/chat.h"
#include "tokenizer/jinja/template.h"

namespace drift::jinja {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpusDir = fs::path(DRIFT_JINJA_TEST_DIR) / "corpus";
const fs::path kExpectedDir = fs::path(DRIFT_JINJA_TEST_DIR) / "expected";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::vector<std::string> stems_in(const fs::path& dir, const std::string& extension) {
  std::vector<std::string> stems;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == extension) stems.push_back(entry.path().stem().string());
  }
  std::sort(stems.begin(), stems.end());
  return stems;
}

std::vector<std::string> template_names() { return stems_in(kCorpusDir / "templates", ".jinja"); }
std::vector<std::string> conversation_names() { return stems_in(kCorpusDir / "conversations", ".json"); }

ChatTemplateInputs inputs_for(const std::string& conversation_name, bool add_generation_prompt) {
  const auto tokens = nlohmann::ordered_json::parse(read_file(kCorpusDir / "special_tokens.json"));
  const auto conversation =
      nlohmann::ordered_json::parse(read_file(kCorpusDir / "conversations" / (conversation_name + ".json")));
  ChatTemplateInputs inputs;
  inputs.messages = conversation.at("messages");
  inputs.tools = conversation.value("tools", nlohmann::ordered_json());
  inputs.extra = conversation.value("extra", nlohmann::ordered_json::object());
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = tokens.at("bos_token").get<std::string>();
  inputs.eos_token = tokens.at("eos_token").get<std::string>();
  return inputs;
}

// Where two renders part ways, with a little context, so a failure says more than "differs".
std::string first_difference(const std::string& got, const std::string& want) {
  size_t at = 0;
  while (at < got.size() && at < want.size() && got[at] == want[at]) ++at;
  const size_t from = at < 40 ? 0 : at - 40;
  return "first difference at byte " + std::to_string(at) + "\n  got:  ..." +
         nlohmann::json(got.substr(from, 100)).dump() + "\n  want: ..." + nlohmann::json(want.substr(from, 100)).dump();
}

class OracleParity : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleParity, EveryConversationRendersLikeTheOracle) {
  const std::string& template_name = GetParam();
  auto parsed = Template::parse(read_file(kCorpusDir / "templates" / (template_name + ".jinja")));
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  int identical = 0;
  int total = 0;
  for (const std::string& conversation : conversation_names()) {
    for (const bool generation_prompt : {false, true}) {
      ++total;
      const std::string pair = template_name + " x " + conversation + (generation_prompt ? " (gen on)" : " (gen off)");
      const fs::path stem =
          kExpectedDir / template_name / (conversation + (generation_prompt ? ".gen-on" : ".gen-off"));
      const auto rendered = render_chat(*parsed, inputs_for(conversation, generation_prompt));
      if (fs::exists(stem.string() + ".error.txt")) {
        const std::string oracle_error = read_file(stem.string() + ".error.txt");
        if (rendered.ok()) {
          ADD_FAILURE() << pair << ": the oracle raised \"" << oracle_error << "\" but this rendered";
        } else if (rendered.status().message() != oracle_error) {
          ADD_FAILURE() << pair << ": error differs\n  got:  " << rendered.status().message()
                        << "\n  want: " << oracle_error;
        } else {
          ++identical;
        }
        continue;
      }
      ASSERT_TRUE(fs::exists(stem.string() + ".txt")) << pair << ": no expected output; re-run oracle/render.mjs";
      const std::string expected = read_file(stem.string() + ".txt");
      if (!rendered.ok()) {
        ADD_FAILURE() << pair << ": " << rendered.status().message();
      } else if (*rendered != expected) {
        ADD_FAILURE() << pair << ": " << first_difference(*rendered, expected);
      } else {
        ++identical;
      }
    }
  }
  std::cout << "[ parity   ] " << template_name << ": " << identical << "/" << total << " identical to the oracle\n";
  EXPECT_EQ(identical, total);
}

INSTANTIATE_TEST_SUITE_P(Corpus, OracleParity, ::testing::ValuesIn(template_names()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// expected/ holds exactly one result per pair: nothing stale from a removed template or conversation.
TEST(OracleCorpus, ExpectedOutputsMatchTheCorpusExactly) {
  std::vector<std::string> wanted;
  for (const auto& template_name : template_names()) {
    for (const auto& conversation : conversation_names()) {
      for (const char* generation : {"gen-off", "gen-on"})
        wanted.push_back(template_name + "/" + conversation + "." + generation);
    }
  }
  std::vector<std::string> present;
  for (const auto& entry : fs::recursive_directory_iterator(kExpectedDir)) {
    if (!entry.is_regular_file()) continue;
    std::string relative = fs::relative(entry.path(), kExpectedDir).generic_string();
    for (const std::string suffix : {".error.txt", ".txt"}) {
      if (relative.ends_with(suffix)) {
        relative.resize(relative.size() - suffix.size());
        break;
      }
    }
    present.push_back(relative);
  }
  std::sort(wanted.begin(), wanted.end());
  std::sort(present.begin(), present.end());
  EXPECT_EQ(present, wanted);
  EXPECT_GE(wanted.size(), 200u) << "the corpus should cover at least 200 template x conversation pairs";
}

}  // namespace
}  // namespace drift::jinja
