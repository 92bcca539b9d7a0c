// `drift` as a new user runs it. A model a backend cannot run (an F32 KV cache on CUDA, an FP8 KV cache on
// the CPU) is refused before loading with a message that names what is missing and exit
// code 1, never a crash trace. Speculation and the KV dtype are options of every engine command; inspect
// and perplexity use the public API (drift/model_info.h, drift/perplexity.h). Two drift processes split a
// model as two nodes (--nnodes) and give the tokens of --tensor-parallel 2 in one process.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/comm/socket_group.h"
#include "cli_run.h"
#include "drift/engine.h"
#include "drift/model_info.h"
#include "drift/perplexity.h"
#ifdef DRIFT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

namespace drift::testing {
namespace {



void expect_clean_failure(const CommandRun& r) {
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("drift: "), std::string::npos) << r.out;
  for (const char* crash : {"fatal signal", "std::terminate", "check failed", "Aborted", "last engine events"})
    EXPECT_EQ(r.out.find(crash), std::string::npos) << crash << " in: " << r.out;
}

bool have_gpu() {
#ifdef DRIFT_HAVE_CUDA
  return backend::cuda_device_count() > 0;
#else
  return false;
#endif
}

TEST(Cli, UnsupportedModelOnCudaIsANamedErrorNotATrace) {
  const CommandRun r =
      drift("generate -m " + fixture("deepseek_v2") + " --device cuda --kv-cache-dtype f32 -p hello -n 2");
  expect_clean_failure(r);
  if (have_gpu()) {
    EXPECT_NE(r.out.find("DeepseekV2ForCausalLM cannot run on the cuda backend: layer 0 (attention)"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("keeps the KV cache in BF16"), std::string::npos) << r.out;
  } else {
    // Without a GPU the backend itself is what is missing, and the message says so.
    EXPECT_TRUE(r.out.find("CUDA device 0 is not available") != std::string::npos ||
                r.out.find("no CUDA backend") != std::string::npos)
        << r.out;
  }
}

TEST(Cli, KvCacheDtypeFp8RunsAndAnUnknownOneIsRefused) {
  const CommandRun fp8 = drift("generate -m " + fixture("llama") + " --kv-cache-dtype fp8 -p hello -n 3 --ignore-eos");
  EXPECT_EQ(fp8.exit_code, 0) << fp8.out;
  const CommandRun bf16 = drift("generate -m " + fixture("llama") + " --kv-cache-dtype bf16 -p hello -n 3 --ignore-eos");
  EXPECT_EQ(bf16.exit_code, 0) << bf16.out;
  const CommandRun bad = drift("generate -m " + fixture("llama") + " --kv-cache-dtype int3 -p hello -n 2");
  EXPECT_NE(bad.exit_code, 0) << bad.out;
  EXPECT_NE(bad.out.find("int3"), std::string::npos) << bad.out;
}

TEST(Cli, NgramSpeculationKeepsTheGreedyOutput) {
  const std::string args = "generate -p \"The package provides the following files: the package provides\" -n 40 "
                           "--output json";
  const CommandRun plain = drift(args);
  const CommandRun spec = drift(args + " --speculative ngram --spec-tokens 5");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  const auto ids = [](const std::string& out) {
    const size_t at = out.find("\"generated_token_ids\"");
    return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at);
  };
  EXPECT_FALSE(ids(plain.out).empty());
  EXPECT_EQ(ids(spec.out), ids(plain.out));
  EXPECT_NE(spec.out.find("drafts accepted"), std::string::npos) << spec.out;
}

// generated_token_ids of a `--output json` run, as text.
std::string generated_ids(const std::string& out) {
  const size_t at = out.find("\"generated_token_ids\"");
  return at == std::string::npos ? std::string() : out.substr(at, out.find(']', at) - at);
}

TEST(Cli, TwoNodeProcessesGiveTheTensorParallelTokens) {
  auto port = backend::pick_free_port(2);  // the control channel and the layers' one after it
  ASSERT_TRUE(port.ok()) << port.status().to_string();
  const std::string args = "generate -m " + fixture("llama") + " -p \"Once upon a time\" -n 12 --ignore-eos --output json";
  const std::string nodes = " --nnodes 2 --master-port " + std::to_string(*port);
  const CommandRun one_process = drift(args + " --tensor-parallel 2");
  // Node 1 in the background, its output and exit code after node 0's.
  const std::string node1_log = ::testing::TempDir() + "node1.log";
  const CommandRun two = shell("{ (" + std::string(DRIFT_BINARY) + " " + args + nodes + " --node-rank 1 >" + node1_log +
                               " 2>&1; echo \"node 1 exit $?\" >>" + node1_log + ") & " + std::string(DRIFT_BINARY) +
                               " " + args + nodes + "; wait; cat " + node1_log + "; }");
  ASSERT_EQ(one_process.exit_code, 0) << one_process.out;
  ASSERT_EQ(two.exit_code, 0) << two.out;
  EXPECT_FALSE(generated_ids(one_process.out).empty()) << one_process.out;
  EXPECT_EQ(generated_ids(two.out), generated_ids(one_process.out)) << two.out;
  EXPECT_NE(two.out.find("node 1: node 0 ended the group"), std::string::npos) << two.out;
  EXPECT_NE(two.out.find("node 1 exit 0"), std::string::npos) << two.out;
}

TEST(Cli, AConfigAloneBorrowsATokenizer) {
  // Benchmarks of a real shape start from config.json alone: random weights, the tokenizer from elsewhere.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("drift_config_only_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(fixture("gpt_oss") + "/config.json", dir / "config.json",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string args = "generate -m " + dir.string() + " --random-weights -p hello -n 3 --ignore-eos";
  const CommandRun alone = drift(args);
  expect_clean_failure(alone);
  EXPECT_NE(alone.out.find("tokenizer.json"), std::string::npos) << alone.out;
  const CommandRun borrowed = drift(args + " --tokenizer " + fixture("gpt_oss"));
  EXPECT_EQ(borrowed.exit_code, 0) << borrowed.out;
  std::filesystem::remove_all(dir);
}

TEST(PublicApi, InspectReportsTheKvGroupsOfTheLayerPlan) {
  auto info = inspect_model(fixture("gpt_oss"));
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  ASSERT_EQ(info->kv_groups.size(), 2u);
  EXPECT_EQ(info->kv_groups[0].name, "sliding");
  EXPECT_EQ(info->kv_groups[0].sliding_window, 8);
  EXPECT_EQ(info->kv_groups[1].name, "full");
  EXPECT_EQ(info->kv_bytes_per_token, info->kv_groups[0].bytes_per_token + info->kv_groups[1].bytes_per_token);
  EXPECT_FALSE(inspect_model(fixture("gpt_oss"), "int3").ok());
  const CommandRun r = drift("inspect -m " + fixture("gpt_oss"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("kv group       sliding"), std::string::npos) << r.out;
}

// FP8 KV counts its scales: the llama fixture (head_dim 16) takes 16 + 4 bytes a K or V row against
// BF16's 32, and full multi-head attention's figure follows the same rule.
TEST(PublicApi, InspectCountsFp8Scales) {
  auto bf16 = inspect_model(fixture("llama"), "bf16");
  auto fp8 = inspect_model(fixture("llama"), "fp8");
  ASSERT_TRUE(bf16.ok() && fp8.ok());
  EXPECT_EQ(fp8->kv_bytes_per_token * 32, bf16->kv_bytes_per_token * 20);
  EXPECT_EQ(fp8->mha_kv_bytes_per_token * 32, bf16->mha_kv_bytes_per_token * 20);
}

// GPT-OSS-20B from its config.json alone: at 32k context its sliding layers hold 128 tokens of window plus
// one step, so the cache is at most 55% of what full attention on every layer would hold.
TEST(PublicApi, InspectShowsTheSlidingWindowSavingFromAConfigAlone) {
  const std::string dir = std::string(DRIFT_BENCH_CONFIGS_DIR) + "/gpt-oss-20b";
  auto info = inspect_model(dir);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_FALSE(info->has_weights);
  ASSERT_EQ(info->kv_groups.size(), 2u);
  EXPECT_EQ(info->kv_groups[0].sliding_window, 128);
  EXPECT_EQ(info->kv_groups[0].num_layers, 12);
  const EngineConfig defaults;
  const KvFootprint f = kv_footprint(*info, 32768, defaults.block_size, defaults.max_num_batched_tokens);
  EXPECT_EQ(f.group_blocks[1], 32768 / defaults.block_size);
  EXPECT_LT(f.group_blocks[0] * 10, f.group_blocks[1]);
  EXPECT_LE(f.fraction(), 0.55);
  EXPECT_GT(f.fraction(), 0.5);

  const CommandRun r = drift("inspect -m " + dir + " --context 32768");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("config.json only"), std::string::npos) << r.out;
  const size_t at = r.out.find("% of full attention on every layer");
  ASSERT_NE(at, std::string::npos) << r.out;
  const size_t begin = r.out.rfind(' ', at) + 1;
  const double percent = std::stod(r.out.substr(begin, at - begin));
  EXPECT_LE(percent, 55.0) << r.out;
  EXPECT_NEAR(percent, 100.0 * f.fraction(), 0.05) << r.out;
}

TEST(PublicApi, PerplexityOfTheCommandEqualsTheLibrarys) {
  const std::string text = "A dictionary is a list of words. The package provides the following files.";
  PerplexityConfig config;
  config.model_dir = fixture("llama");
  config.context = 16;
  auto result = measure_perplexity(config, text);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->num_scored, result->num_tokens - 1);
  EXPECT_GT(result->bits_per_byte(), 0.0);
  const std::string path = ::testing::TempDir() + "/drift_perplexity.txt";
  std::ofstream(path) << text;
  const CommandRun r = drift("perplexity -m " + fixture("llama") + " --context 16 -f " + path);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  char expected[64];
  std::snprintf(expected, sizeof expected, "bits per byte  %.6f", result->bits_per_byte());
  EXPECT_NE(r.out.find(expected), std::string::npos) << expected << " in " << r.out;
  EXPECT_FALSE(measure_perplexity(config, "").ok());
}

}  // namespace
}  // namespace drift::testing
