// Feature and error cases from cases/*.json, one test each: a template source, its context, and
// either the exact output or a fragment the error message must contain (errors name the line, the
// column and the construct). The expected outputs are Jinja2's: oracle/check_cases_jinja2.py checks
// every case against Python's Jinja2, except those whose "jinja2" field says why Drift differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/jinja/template.h"

namespace drift::jinja {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string group;  // the file: whitespace, expressions, statements, filters, tests, methods, errors
  nlohmann::ordered_json spec;
};

std::vector<Case> load_cases() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(DRIFT_JINJA_TEST_DIR) / "cases")) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Case> cases;
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    for (auto& spec : nlohmann::ordered_json::parse(text.str()))
      cases.push_back({file.stem().string(), std::move(spec)});
  }
  return cases;
}

// Names the case in test listings instead of dumping its bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << c.group << "/" << c.spec.at("name").get<std::string>(); }

class JinjaCase : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaCase, RendersAsExpected) {
  const auto& spec = GetParam().spec;
  const std::string source = spec.at("source").get<std::string>();
  const auto context = spec.value("context", nlohmann::ordered_json::object());
  auto parsed = Template::parse(source);
  Expected<std::string> rendered = parsed.ok() ? parsed->render(context) : Expected<std::string>(parsed.status());
  if (spec.contains("error")) {
    ASSERT_FALSE(rendered.ok()) << "rendered " << nlohmann::json(*rendered).dump() << " but an error was expected";
    EXPECT_NE(rendered.status().message().find(spec.at("error").get<std::string>()), std::string::npos)
        << "message: " << rendered.status().message() << "\nwanted:  " << spec.at("error").get<std::string>();
    return;
  }
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_EQ(*rendered, spec.at("expected").get<std::string>());
}

INSTANTIATE_TEST_SUITE_P(Cases, JinjaCase, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.group + "_" + param.param.spec.at("name").get<std::string>();
                         });

}  // namespace
}  // namespace drift::jinja
