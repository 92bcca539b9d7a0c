// Every relative Markdown link in README.md, docs/*.md and each README.md under src/ and tests/ names a
// file or folder that exists inside the repository. Links to http(s) and mailto, and pure #anchors, are
// skipped; a #fragment is stripped; a target resolves against the folder of the file that holds it.
// Fenced code blocks and `code spans` are not Markdown links and are skipped too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

const fs::path kRoot = fs::path(DRIFT_SOURCE_DIR).lexically_normal();

struct Link {
  int line = 0;
  std::string target;  // as written, without <> or a title
};

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The text with fenced code blocks blanked (line breaks kept, so line numbers stay right).
std::string blank_fences(const std::string& text) {
  std::istringstream in(text);
  std::string out, line, fence;
  while (std::getline(in, line)) {
    const size_t indent = line.find_first_not_of(' ');
    const std::string body = indent == std::string::npos || indent > 3 ? std::string() : line.substr(indent);
    const bool is_fence = starts_with(body, "```") || starts_with(body, "~~~");
    if (fence.empty() && is_fence) {
      fence = body.substr(0, body.find_first_not_of(body[0]));  // the opening run: ``` or ~~~~ ...
    } else if (!fence.empty() && is_fence && starts_with(body, fence)) {
      fence.clear();
    } else if (fence.empty()) {
      out += line;
    }
    out += '\n';
  }
  return out;
}

// The text with each code span (a run of backticks up to the next run of the same length) replaced by
// "code", keeping its line breaks.
std::string blank_code_spans(const std::string& text) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '`') {
      out += text[i++];
      continue;
    }
    const size_t run_end = text.find_first_not_of('`', i);
    const std::string run = text.substr(i, (run_end == std::string::npos ? text.size() : run_end) - i);
    size_t close = run_end == std::string::npos ? std::string::npos : text.find(run, run_end);
    // A closing run must be exactly as long as the opening one.
    while (close != std::string::npos && close + run.size() < text.size() && text[close + run.size()] == '`')
      close = text.find(run, text.find_first_not_of('`', close));
    if (close == std::string::npos) {  // no closing run: literal backticks
      out += run;
      i += run.size();
      continue;
    }
    out += "code";
    out.append(size_t(std::count(text.begin() + ptrdiff_t(i), text.begin() + ptrdiff_t(close), '\n')), '\n');
    i = close + run.size();
  }
  return out;
}

int line_of(const std::string& text, size_t pos) {
  return 1 + int(std::count(text.begin(), text.begin() + ptrdiff_t(pos), '\n'));
}

// Inline links and images `[text](target "title")`, and reference definitions `[label]: target`.
std::vector<Link> extract_links(const std::string& markdown) {
  const std::string text = blank_code_spans(blank_fences(markdown));
  static const std::regex inline_link(R"re(\[[^\[\]]*\]\(\s*(<[^>\n]*>|[^\s()]*)(\s+("[^"]*"|'[^']*'))?\s*\))re");
  static const std::regex definition(R"re((^|\n) {0,3}\[[^\[\]\n]+\]:[ \t]*(<[^>\n]*>|\S+))re");
  std::vector<Link> links;
  auto add = [&](size_t pos, std::string target) {
    if (target.size() >= 2 && target.front() == '<' && target.back() == '>') target = target.substr(1, target.size() - 2);
    links.push_back({line_of(text, pos), target});
  };
  for (auto it = std::sregex_iterator(text.begin(), text.end(), inline_link); it != std::sregex_iterator(); ++it)
    add(size_t(it->position(1)), (*it)[1].str());
  for (auto it = std::sregex_iterator(text.begin(), text.end(), definition); it != std::sregex_iterator(); ++it)
    add(size_t(it->position(2)), (*it)[2].str());
  std::sort(links.begin(), links.end(), [](const Link& a, const Link& b) { return a.line < b.line; });
  return links;
}

bool is_external_or_anchor(const std::string& target) {
  std::string lower = target;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return target.empty() || target[0] == '#' || starts_with(lower, "http://") || starts_with(lower, "https://") ||
         starts_with(lower, "mailto:");
}

std::string percent_decode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The file a relative target names: fragment and query stripped, resolved against `from`'s folder (or
// the repository root for "/path").
fs::path resolve(const fs::path& from, const std::string& target) {
  std::string path = target.substr(0, target.find_first_of("#?"));
  path = percent_decode(path);
  const fs::path base = !path.empty() && path[0] == '/' ? kRoot : from.parent_path();
  return (base / fs::path(path).relative_path()).lexically_normal();
}

bool inside_root(const fs::path& p) {
  const fs::path rel = p.lexically_relative(kRoot);
  return !rel.empty() && *rel.begin() != "..";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// README.md, docs/**/*.md, and every README.md under src/ and tests/.
std::vector<fs::path> documents() {
  std::vector<fs::path> files;
  if (fs::exists(kRoot / "README.md")) files.push_back(kRoot / "README.md");
  if (fs::is_directory(kRoot / "docs"))
    for (const auto& e : fs::recursive_directory_iterator(kRoot / "docs"))
      if (e.is_regular_file() && e.path().extension() == ".md") files.push_back(e.path());
  for (const char* dir : {"src", "tests"})
    if (fs::is_directory(kRoot / dir))
      for (const auto& e : fs::recursive_directory_iterator(kRoot / dir))
        if (e.is_regular_file() && e.path().filename() == "README.md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(MarkdownLinks, ParserFindsLinksOutsideCode) {
  const std::string md =
      "See [the docs](docs/README.md#top) and ![a figure](img/a.png \"title\").\n"
      "A [wrapped\nlink](other.md), [spaces](<a b.md>) and `[in code](not/a/link.md)`.\n"
      "```cpp\n"
      "auto f = [&](int x) { return x; };  // [not](a/link.md)\n"
      "```\n"
      "    ~~~ is not a fence when indented 4\n"
      "[ref]: defs/target.md\n"
      "[web](https://example.com) [mail](mailto:a@b.c) [anchor](#section)\n";
  std::vector<std::string> targets;
  for (const Link& l : extract_links(md)) targets.push_back(l.target);
  const std::vector<std::string> expected = {"docs/README.md#top", "img/a.png", "other.md",          "a b.md",
                                             "defs/target.md",     "https://example.com", "mailto:a@b.c", "#section"};
  std::vector<std::string> sorted_targets = targets, sorted_expected = expected;
  std::sort(sorted_targets.begin(), sorted_targets.end());
  std::sort(sorted_expected.begin(), sorted_expected.end());
  EXPECT_EQ(sorted_targets, sorted_expected);
  EXPECT_TRUE(is_external_or_anchor("https://example.com"));
  EXPECT_TRUE(is_external_or_anchor("HTTP://example.com"));
  EXPECT_TRUE(is_external_or_anchor("mailto:a@b.c"));
  EXPECT_TRUE(is_external_or_anchor("#section"));
  EXPECT_FALSE(is_external_or_anchor("docs/README.md#top"));
  EXPECT_EQ(resolve(kRoot / "docs" / "x.md", "../src/core/README.md#contracts"), kRoot / "src" / "core" / "README.md");
  EXPECT_EQ(resolve(kRoot / "README.md", "docs/a%20b.md"), kRoot / "docs" / "a b.md");
  EXPECT_FALSE(inside_root(resolve(kRoot / "README.md", "../shared/DESIGN.md")));
}

TEST(MarkdownLinks, EveryRelativeLinkResolvesInsideTheRepository) {
  ASSERT_TRUE(fs::exists(kRoot / "README.md")) << kRoot;
  ASSERT_TRUE(fs::exists(kRoot / "docs" / "README.md")) << "docs/README.md, the documentation index, is missing";
  const std::vector<fs::path> files = documents();
  int num_checked = 0;
  std::vector<std::string> broken;
  for (const fs::path& file : files) {
    for (const Link& link : extract_links(read_file(file))) {
      if (is_external_or_anchor(link.target)) continue;
      ++num_checked;
      const fs::path target = resolve(file, link.target);
      const std::string where = file.lexically_relative(kRoot).string() + ":" + std::to_string(link.line) + ": (" +
                                link.target + ")";
      if (!inside_root(target))
        broken.push_back(where + " leaves the repository");
      else if (!fs::exists(target))
        broken.push_back(where + " -> " + target.lexically_relative(kRoot).string() + " does not exist");
    }
  }
  std::string report;
  for (const std::string& b : broken) report += "\n  " + b;
  EXPECT_TRUE(broken.empty()) << broken.size() << " broken link(s) in " << files.size() << " files:" << report;
  // The index links every page: a scan that finds nothing is itself broken.
  EXPECT_GT(num_checked, 0);
}

}  // namespace
