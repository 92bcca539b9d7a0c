#include "weights/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "scratch_dir.h"

namespace drift::weights {
namespace {

using ::testing::HasSubstr;
using testutil::ScratchDir;

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

template <class T>
std::vector<T> values_of(std::span<const std::byte> bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

// `[u64 header_len][header][data]` written by hand, so the header can be anything.
std::string raw_file(std::string_view header, std::string_view data, std::optional<uint64_t> header_len = {}) {
  const uint64_t len = header_len.value_or(header.size());
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  out += header;
  out += data;
  return out;
}

// Opening must fail; returns the message.
std::string open_error(const std::string& path) {
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.ok()) << path << " opened, but it is malformed";
  return file.ok() ? std::string() : file.status().message();
}

TEST(Safetensors, WriteThenReadRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.file("t.safetensors");
  const std::vector<float> w = {1, -2, 3.5f, 4, 5, 6};
  const std::vector<uint16_t> b = {0x3f80, 0xc000, 0x0000, 0x7f80};
  const std::vector<int64_t> scalar = {-7};
  ASSERT_TRUE(write_safetensors(path,
                                {{"w", DType::kF32, {2, 3}, bytes_of(w)},
                                 {"b", DType::kBF16, {4}, bytes_of(b)},
                                 {"step", DType::kI64, {}, bytes_of(scalar)},
                                 {"empty", DType::kU8, {0, 5}, {}}},
                                {{"format", "pt"}})
                  .ok());

  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->names(), (std::vector<std::string>{"b", "empty", "step", "w"}));
  EXPECT_EQ(file->metadata().at("format"), "pt");

  const TensorInfo* t = file->find("w");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(t->file, path);
  EXPECT_EQ(values_of<float>(t->bytes), w);

  ASSERT_NE(file->find("b"), nullptr);
  EXPECT_EQ(values_of<uint16_t>(file->find("b")->bytes), b);
  ASSERT_NE(file->find("step"), nullptr);
  EXPECT_TRUE(file->find("step")->shape.empty());
  EXPECT_EQ(file->find("step")->numel(), 1);
  EXPECT_EQ(values_of<int64_t>(file->find("step")->bytes), scalar);
  ASSERT_NE(file->find("empty"), nullptr);
  EXPECT_EQ(file->find("empty")->numel(), 0);
  EXPECT_TRUE(file->find("empty")->bytes.empty());
  EXPECT_EQ(file->find("missing"), nullptr);
}

TEST(Safetensors, WriterAlignsTheDataSoWideTypesCanBeReadInPlace) {
  ScratchDir dir;
  const std::string path = dir.file("t.safetensors");
  ASSERT_TRUE(
      write_safetensors(path, {{"a_name_of_odd_length", DType::kF64, {3}, bytes_of(std::vector<double>{1, 2, 3})}})
          .ok());
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(file->find("a_name_of_odd_length")->bytes.data()) % 8, 0u);
}

TEST(Safetensors, ReadsTheCommittedQwen2Fixture) {
  const std::string path = std::string(DRIFT_FIXTURES_DIR) + "/models/qwen2/model.safetensors";
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  // lm_head, embed_tokens, norm, and 12 tensors in each of 2 layers (q/k/v carry biases).
  EXPECT_EQ(file->num_tensors(), 27u);
  const TensorInfo* bias = file->find("model.layers.0.self_attn.q_proj.bias");
  ASSERT_NE(bias, nullptr);
  EXPECT_EQ(bias->dtype, DType::kF32);
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{96}));
  EXPECT_EQ(bias->bytes.size(), 96u * 4);
  EXPECT_EQ(file->metadata().at("format"), "pt");
}

TEST(Safetensors, MissingFileIsNotFound) {
  ScratchDir dir;
  Expected<SafetensorsFile> file = SafetensorsFile::open(dir.file("absent.safetensors"));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(file.status().message(), HasSubstr("absent.safetensors"));
}

TEST(Safetensors, FileShorterThanTheLengthFieldIsRejected) {
  ScratchDir dir;
  const std::string path = dir.write("short.safetensors", std::string("\x10\x00\x00", 3));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("too short"));
}

TEST(Safetensors, TruncatedDataIsRejectedNamingTheTensor) {
  ScratchDir dir;
  const std::string path = dir.file("cut.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"first", DType::kF32, {4}, bytes_of(std::vector<float>{1, 2, 3, 4})},
                                       {"last", DType::kF32, {4}, bytes_of(std::vector<float>{5, 6, 7, 8})}})
                  .ok());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 6);
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr("tensor 'last'"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("past the end of the data"));
}

TEST(Safetensors, HeaderLengthBeyondTheFileIsRejected) {
  ScratchDir dir;
  const std::string path = dir.write("long.safetensors", raw_file("{}", "", 4096));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("header length 4096"));
}

TEST(Safetensors, CorruptJsonHeaderIsRejected) {
  ScratchDir dir;
  const std::string path = dir.write("corrupt.safetensors", raw_file(R"({"w": {"dtype": "F32", "shape": [1)", "abcd"));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("not valid JSON"));
}

TEST(Safetensors, HeaderThatIsNotAnObjectIsRejected) {
  ScratchDir dir;
  const std::string path = dir.write("list.safetensors", raw_file("[1, 2]", ""));
  EXPECT_THAT(open_error(path), HasSubstr("not a JSON object"));
}

TEST(Safetensors, UnknownDtypeIsUnsupportedNamingTheTensor) {
  ScratchDir dir;
  const std::string path = dir.write(
      "q4.safetensors", raw_file(R"({"blk.0": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", "xx"));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kUnsupported);
  EXPECT_THAT(file.status().message(), HasSubstr("tensor 'blk.0'"));
  EXPECT_THAT(file.status().message(), HasSubstr(path));
  EXPECT_THAT(file.status().message(), HasSubstr("unknown dtype 'Q4_K'"));
}

TEST(Safetensors, NewerDtypeNamesSayUnsupportedRatherThanUnknown) {
  ScratchDir dir;
  const std::string path = dir.write(
      "e8m0.safetensors", raw_file(R"({"scales": {"dtype": "F8_E8M0", "shape": [2], "data_offsets": [0, 2]}})", "xx"));
  EXPECT_THAT(open_error(path), HasSubstr("unsupported dtype 'F8_E8M0'"));
}

TEST(Safetensors, OffsetsBeyondTheDataAreRejected) {
  ScratchDir dir;
  const std::string path = dir.write(
      "far.safetensors", raw_file(R"({"w": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}})", "12345678"));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr("tensor 'w'"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("[4, 12]"));
  EXPECT_THAT(message, HasSubstr("8 bytes"));
}

TEST(Safetensors, OffsetsThatDisagreeWithTheShapeAreRejected) {
  ScratchDir dir;
  const std::string path = dir.write(
      "size.safetensors", raw_file(R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", "12345678"));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr("tensor 'w'"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("hold 8 bytes, but shape [3] of F32 needs 12 bytes"));
}

TEST(Safetensors, OverlappingTensorsAreRejected) {
  ScratchDir dir;
  const std::string path =
      dir.write("overlap.safetensors", raw_file(R"({"a": {"dtype": "U8", "shape": [6], "data_offsets": [0, 6]},
                                                  "b": {"dtype": "U8", "shape": [4], "data_offsets": [4, 8]}})",
                                                "12345678"));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr("'a'"));
  EXPECT_THAT(message, HasSubstr("'b'"));
  EXPECT_THAT(message, HasSubstr("overlap"));
  EXPECT_THAT(message, HasSubstr(path));
}

TEST(Safetensors, GapsBetweenTensorsAreAllowed) {
  ScratchDir dir;
  const std::string path =
      dir.write("gap.safetensors", raw_file(R"({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                                                  "b": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})",
                                            "ab----cd"));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file->find("b")->bytes.data()), 2), "cd");
}

TEST(Safetensors, MissingFieldsAreNamed) {
  ScratchDir dir;
  const std::pair<const char*, const char*> cases[] = {
      {R"({"w": {"shape": [2], "data_offsets": [0, 2]}})", "no 'dtype'"},
      {R"({"w": {"dtype": "U8", "data_offsets": [0, 2]}})", "no 'shape'"},
      {R"({"w": {"dtype": "U8", "shape": [2]}})", "no 'data_offsets'"},
      {R"({"w": {"dtype": "U8", "shape": [-2], "data_offsets": [0, 2]}})", "not a non-negative integer"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0]}})", "not a pair"},
      {R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [2, 0]}})", "end before they begin"},
      {R"({"w": 3})", "not an object"},
  };
  for (const auto& [header, expected] : cases) {
    const std::string path = dir.write("fields.safetensors", raw_file(header, "xx"));
    const std::string message = open_error(path);
    EXPECT_THAT(message, HasSubstr("tensor 'w'")) << header;
    EXPECT_THAT(message, HasSubstr(path)) << header;
    EXPECT_THAT(message, HasSubstr(expected)) << header;
  }
}

TEST(Safetensors, MetadataValuesMustBeStrings) {
  ScratchDir dir;
  const std::string path = dir.write("meta.safetensors", raw_file(R"({"__metadata__": {"total": 3}})", ""));
  const std::string message = open_error(path);
  EXPECT_THAT(message, HasSubstr("__metadata__"));
  EXPECT_THAT(message, HasSubstr("'total'"));
}

TEST(Safetensors, WriterRefusesBytesThatDisagreeWithTheShape) {
  ScratchDir dir;
  const Status s =
      write_safetensors(dir.file("bad.safetensors"), {{"w", DType::kF32, {2, 2}, std::vector<std::byte>(12)}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' has 12 bytes, but shape [2, 2] of F32 needs 16"));
}

TEST(Safetensors, WriterRefusesDuplicateNames) {
  ScratchDir dir;
  const Status s = write_safetensors(dir.file("dup.safetensors"), {{"w", DType::kU8, {1}, std::vector<std::byte>(1)},
                                                                   {"w", DType::kU8, {1}, std::vector<std::byte>(1)}});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("tensor 'w' is given twice"));
}

}  // namespace
}  // namespace drift::weights
