// The EAGLE-3 head's forward through a ModelRunner on the CPU backend against a plain fp64 host
// implementation written here from the paper's description (embedding, RMSNorms, attention with RoPE,
// SwiGLU): a chain of rows, then a 3-node tree. That checks the concat order (embedding first), the
// residual (h, or hidden_norm(h) with norm_before_residual), the pre-norm output, RoPE positions and which
// rows a tree node sees. Also fuse_taps against the target's taps, and random heads for every family.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eagle3_head_folder.h"
#include "fixture_model.h"
#include "model/arch/eagle3.h"
#include "model/registry.h"

namespace drift::testing {
namespace {

constexpr double kTolerance = 1e-4;

struct Target {
  std::unique_ptr<backend::Ops> ops;
  std::unique_ptr<model::Model> model;
};

Target load_target(const std::string& name) {
  Target t{backend::make_cpu_ops(), nullptr};
  auto m = model::load_model(fixture_dir(name), *t.ops);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (m.ok()) t.model = std::move(m).value();
  return t;
}

void write_rows(backend::Ops& ops, const Tensor& dst, const std::vector<float>& rows) {
  const int64_t n = int64_t(rows.size()) / dst.size(1);
  ops.copy_from_host(dst.slice(0, n), rows.data());
}

using Vec = std::vector<double>;

// One row of the reference: its token, input hidden, RoPE position and the rows (of all rows given to
// run()) whose keys it sees, itself included.
struct RefRow {
  int32_t token = 0;
  std::vector<float> hidden;
  int32_t position = 0;
  std::vector<size_t> visible;
};

// The head computed straight from its weights in fp64.
class Reference {
 public:
  Reference(const HeadFolder& w, std::string prefix, std::vector<float> embedding)
      : w_(w), p_(std::move(prefix)), embedding_(std::move(embedding)) {
    const auto& c = w.config;
    h_ = c["hidden_size"].get<int64_t>();
    heads_ = c["num_attention_heads"].get<int64_t>();
    kv_heads_ = c["num_key_value_heads"].get<int64_t>();
    d_ = c["head_dim"].get<int64_t>();
    eps_ = c["rms_norm_eps"].get<double>();
    theta_ = c["rope_theta"].get<double>();
    norm_before_residual_ = c.value("norm_before_residual", false);
  }

  // Pre-norm outputs [rows, H] and logits [rows, Vd].
  std::pair<std::vector<float>, std::vector<float>> run(const std::vector<RefRow>& rows) const {
    std::vector<Vec> q(rows.size()), k(rows.size()), v(rows.size()), residual(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      const Vec e(embedding_.begin() + rows[r].token * h_, embedding_.begin() + (rows[r].token + 1) * h_);
      const Vec hidden(rows[r].hidden.begin(), rows[r].hidden.end());
      Vec x = norm(e, p_ + ".input_layernorm.weight");
      const Vec hn = norm(hidden, p_ + ".hidden_norm.weight");
      x.insert(x.end(), hn.begin(), hn.end());  // embedding first
      q[r] = rope(linear(x, p_ + ".self_attn.q_proj.weight"), rows[r].position);
      k[r] = rope(linear(x, p_ + ".self_attn.k_proj.weight"), rows[r].position);
      v[r] = linear(x, p_ + ".self_attn.v_proj.weight");
      residual[r] = norm_before_residual_ ? hn : hidden;
    }
    std::vector<float> prenorm, logits;
    for (size_t r = 0; r < rows.size(); ++r) {
      Vec h1 = add(residual[r], linear(attend(q[r], k, v, rows[r].visible), p_ + ".self_attn.o_proj.weight"));
      const Vec n = norm(h1, p_ + ".post_attention_layernorm.weight");
      const Vec gate = linear(n, p_ + ".mlp.gate_proj.weight"), up = linear(n, p_ + ".mlp.up_proj.weight");
      Vec act(gate.size());
      for (size_t i = 0; i < act.size(); ++i) act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const Vec h2 = add(h1, linear(act, p_ + ".mlp.down_proj.weight"));
      prenorm.insert(prenorm.end(), h2.begin(), h2.end());
      const Vec l = linear(norm(h2, "norm.weight"), "lm_head.weight");
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return {prenorm, logits};
  }

 private:
  Vec norm(const Vec& x, const std::string& weight) const {
    double ss = 0.0;
    for (double a : x) ss += a * a;
    const double inv = 1.0 / std::sqrt(ss / double(x.size()) + eps_);
    const std::vector<float>& g = w_[weight];
    Vec out(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * inv * g[i];
    return out;
  }
  Vec linear(const Vec& x, const std::string& weight) const {
    const std::vector<float>& m = w_[weight];
    Vec out(m.size() / x.size());
    for (size_t o = 0; o < out.size(); ++o)
      for (size_t i = 0; i < x.size(); ++i) out[o] += double(m[o * x.size() + i]) * x[i];
    return out;
  }
  static Vec add(Vec a, const Vec& b) {
    for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    return a;
  }
  // Llama's rotate-half on every head.
  Vec rope(Vec x, int32_t position) const {
    const int64_t half = d_ / 2;
    for (size_t head = 0; head < x.size() / size_t(d_); ++head) {
      double* row = x.data() + head * size_t(d_);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = position * std::pow(theta_, -double(2 * i) / double(d_));
        const double a = row[i], b = row[i + half];
        row[i] = a * std::cos(angle) - b * std::sin(angle);
        row[i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
    }
    return x;
  }
  Vec attend(const Vec& q, const std::vector<Vec>& k, const std::vector<Vec>& v, const std::vector<size_t>& visible) const {
    Vec out(size_t(heads_ * d_));
    for (int64_t head = 0; head < heads_; ++head) {
      const size_t kv = size_t(head / (heads_ / kv_heads_) * d_), qo = size_t(head * d_);
      std::vector<double> scores;
      double top = -1e300, sum = 0.0;
      for (size_t j : visible) {
        double s = 0.0;
        for (int64_t i = 0; i < d_; ++i) s += q[qo + size_t(i)] * k[j][kv + size_t(i)];
        scores.push_back(s / std::sqrt(double(d_)));
        top = std::max(top, scores.back());
      }
      for (double& s : scores) sum += (s = std::exp(s - top));
      for (size_t t = 0; t < visible.size(); ++t)
        for (int64_t i = 0; i < d_; ++i) out[qo + size_t(i)] += scores[t] / sum * v[visible[t]][kv + size_t(i)];
    }
    return out;
  }

  const HeadFolder& w_;
  std::string p_;
  std::vector<float> embedding_;  // [V, H]
  int64_t h_ = 0, heads_ = 0, kv_heads_ = 0, d_ = 0;
  double eps_ = 0.0, theta_ = 0.0;
  bool norm_before_residual_ = false;
};

std::vector<float> host_copy(const Tensor& t) {  // a CPU-backend tensor
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

struct ForwardCase {
  const char* name;
  const char* prefix;
  bool own_embedding, norm_before_residual;
};

class Eagle3HeadForward : public ::testing::TestWithParam<ForwardCase> {};

TEST_P(Eagle3HeadForward, ChainThenTreeMatchHostReference) {
  const ForwardCase& c = GetParam();
  Target target = load_target("llama");
  ASSERT_TRUE(target.model);
  const int64_t h = target.model->config().hidden_size, vocab = target.model->vocab_size(), draft_vocab = 300;
  HeadFolder folder = random_head_folder(*target.model, draft_vocab, 96, 7, c.prefix);
  folder.config["norm_before_residual"] = c.norm_before_residual;
  std::vector<float> embedding = host_copy(target.model->token_embedding());
  if (c.own_embedding) {
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (float& x : embedding) x = normal(rng);
    folder.tensors["embed_tokens.weight"] = {{vocab, h}, embedding, DType::kF32};
  }
  auto head = model::load_eagle3_head(folder.write(), *target.model, *target.ops);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  model::Eagle3Head& m = **head;
  ASSERT_EQ(m.vocab_size(), draft_vocab);
  ASSERT_EQ(m.kv_specs(DType::kF32).size(), 1u);
  EXPECT_EQ(m.kv_specs(DType::kF32)[0].name, "eagle3");
  EXPECT_EQ(m.draft_to_target()[7], 15);  // i + d2t[i], d2t[i] = i + 1
  runner::ModelRunner runner(m, *target.ops, small_runner_config(4, 8, 64));

  // Six chain rows, then a tree: node 0 at position 6, nodes 1 and 2 its children at position 7.
  const std::vector<int32_t> tokens{5, 17, 300, 41, 8, 99, 11, 23, 650};
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<RefRow> rows(tokens.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].token = tokens[r];
    for (int64_t i = 0; i < h; ++i) rows[r].hidden.push_back(normal(rng));
    rows[r].position = int32_t(std::min<size_t>(r, 6 + (r > 6)));
    for (size_t j = 0; j <= std::min<size_t>(r, 6); ++j) rows[r].visible.push_back(j);
  }
  rows[7].visible.push_back(7);
  rows[8].visible.push_back(8);  // not 7: a sibling
  const auto [want_prenorm, want_logits] = Reference(folder, c.prefix, embedding).run(rows);
  const auto hidden_of = [&](size_t first, size_t n) {
    std::vector<float> out;
    for (size_t r = first; r < first + n; ++r) out.insert(out.end(), rows[r].hidden.begin(), rows[r].hidden.end());
    return out;
  };
  const std::vector<std::vector<int32_t>> tables{{2, 5, 1, 7}};

  write_rows(*target.ops, m.input_hidden(), hidden_of(0, 6));
  runner::SeqStep chain{tokens, 0, 6, tables, false, true};
  auto chain_logits = runner.step({&chain, 1});
  ASSERT_TRUE(chain_logits.ok()) << chain_logits.status().to_string();
  ASSERT_EQ(chain_logits->size(), size_t(6 * draft_vocab));
  EXPECT_LE(relative_max_error(chain_logits->data(), want_logits.data(), chain_logits->size()), kTolerance);
  const auto chain_prenorm = read_rows(*target.ops, m.output_hidden(), 0, 6);
  EXPECT_LE(relative_max_error(chain_prenorm.data(), want_prenorm.data(), chain_prenorm.size()), kTolerance);

  write_rows(*target.ops, m.input_hidden(), hidden_of(6, 3));
  const std::vector<int32_t> positions{6, 7, 7};
  const std::vector<uint32_t> mask{0b001, 0b011, 0b101};
  runner::SeqStep tree{tokens, 6, 3, tables, false, true};
  tree.positions = positions;
  tree.tree_mask = mask;
  auto tree_logits = runner.step({&tree, 1});
  ASSERT_TRUE(tree_logits.ok()) << tree_logits.status().to_string();
  ASSERT_EQ(tree_logits->size(), size_t(3 * draft_vocab));
  EXPECT_LE(relative_max_error(tree_logits->data(), want_logits.data() + 6 * draft_vocab, tree_logits->size()), kTolerance);
  const auto tree_prenorm = read_rows(*target.ops, m.output_hidden(), 0, 3);
  EXPECT_LE(relative_max_error(tree_prenorm.data(), want_prenorm.data() + 6 * h, tree_prenorm.size()), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Eagle3, Eagle3HeadForward,
                         ::testing::Values(ForwardCase{"SafeAILab", "midlayer", false, false},
                                           ForwardCase{"VllmNamesOwnEmbeddingNormBeforeResidual", "layers.0", true, true}),
                         [](const auto& test) { return std::string(test.param.name); });

class Eagle3FuseTaps : public ::testing::TestWithParam<bool> {};

TEST_P(Eagle3FuseTaps, JoinLowMidHighRowsThenFc) {
  const bool norm_before_fc = GetParam();
  Target target = load_target("llama");
  ASSERT_TRUE(target.model);
  backend::Ops& ops = *target.ops;
  const int64_t h = target.model->config().hidden_size;
  HeadFolder folder = random_head_folder(*target.model, 300, 96, 9);
  if (norm_before_fc) {
    folder.config["eagle_config"] = {{"norm_before_fc", true}};
    folder.tensors["input_norm.weight"] = {{3 * h}, std::vector<float>(size_t(3 * h)), DType::kF32};
    for (size_t i = 0; i < size_t(3 * h); ++i) folder.tensors["input_norm.weight"].values[i] = 0.5f + float(i % 7) * 0.1f;
  }
  auto head = model::load_eagle3_head(folder.write(), *target.model, ops);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  model::Eagle3Head& m = **head;
  EXPECT_EQ(m.eagle().capture_layers, (std::vector<int32_t>{2, 1, 0}));  // (2, L/2, L-3) of 2 layers, clamped
  ASSERT_TRUE(target.model->set_hidden_taps(m.eagle().capture_layers).ok());
  runner::RunnerConfig rc = small_runner_config(4, 8, 64);
  runner::ModelRunner target_runner(*target.model, ops, rc);
  runner::ModelRunner head_runner(m, ops, rc);
  const std::vector<int32_t> tokens{0, 17, 300, 41, 8, 99};
  const std::vector<std::vector<int32_t>> tables{{3, 4}};
  runner::SeqStep step{tokens, 0, 6, tables, true, false};
  ASSERT_TRUE(target_runner.step({&step, 1}).ok());

  const std::vector<int32_t> rows{4, 0, 2};
  backend::Buffer device_rows = ops.alloc(DType::kI32, {3});
  ops.copy_from_host(device_rows.view, rows.data());
  const Tensor taps = target.model->hidden_taps();
  m.fuse_taps(taps, device_rows.view, m.input_hidden().slice(0, 3));
  const auto fused = read_rows(ops, m.input_hidden(), 0, 3);

  const int64_t max_rows = taps.size(1);
  const std::vector<float>& fc = folder["fc.weight"];
  std::vector<float> want;
  for (int32_t row : rows) {
    std::vector<double> features;
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t i = 0; i < h; ++i) features.push_back(taps.data_as<float>()[(j * max_rows + row) * h + i]);
    if (norm_before_fc) {
      double ss = 0.0;
      for (double x : features) ss += x * x;
      const double inv = 1.0 / std::sqrt(ss / double(features.size()) + 1e-5);
      for (size_t i = 0; i < features.size(); ++i) features[i] *= inv * folder["input_norm.weight"][i];
    }
    for (int64_t o = 0; o < h; ++o) {
      double dot = 0.0;
      for (size_t i = 0; i < features.size(); ++i) dot += double(fc[size_t(o) * features.size() + i]) * features[i];
      want.push_back(float(dot));
    }
  }
  EXPECT_LE(relative_max_error(fused.data(), want.data(), want.size()), kTolerance);
}

INSTANTIATE_TEST_SUITE_P(Eagle3, Eagle3FuseTaps, ::testing::Bool(),
                         [](const auto& test) { return test.param ? "NormBeforeFc" : "Plain"; });

// One step of four rows of a random head: logits [4, Vd].
std::vector<float> run_random(model::Eagle3Head& head, backend::Ops& ops) {
  runner::ModelRunner runner(head, ops, small_runner_config(4, 8, 64));
  std::vector<float> hidden(size_t(4 * head.config().hidden_size));
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] = float(std::sin(double(i)));
  write_rows(ops, head.input_hidden(), hidden);
  const std::vector<int32_t> tokens{3, 1, 4, 1};
  const std::vector<std::vector<int32_t>> tables{{0}};
  runner::SeqStep step{tokens, 0, 4, tables, false, true};
  auto logits = runner.step({&step, 1});
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>();
}

TEST(Eagle3RandomHead, ShapedAfterTheTargetAndSeeded) {
  Target target = load_target("llama");
  ASSERT_TRUE(target.model);
  const int64_t vocab = target.model->vocab_size();
  auto a = model::random_eagle3_head(*target.model, *target.ops, 11, {.draft_vocab = 100});
  auto b = model::random_eagle3_head(*target.model, *target.ops, 11, {.draft_vocab = 100});
  auto c = model::random_eagle3_head(*target.model, *target.ops, 12, {.draft_vocab = 100});
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status().to_string();
  const model::Eagle3Head& head = **a;
  EXPECT_EQ(head.vocab_size(), 100);
  EXPECT_EQ(head.config().hidden_size, target.model->config().hidden_size);
  EXPECT_EQ(head.config().num_kv_heads, target.model->config().num_kv_heads);
  EXPECT_EQ(head.eagle().capture_layers, (std::vector<int32_t>{2, 1, 0}));
  ASSERT_EQ(head.draft_to_target().size(), 100u);
  for (size_t i = 1; i < 100; ++i) EXPECT_LT(head.draft_to_target()[i - 1], head.draft_to_target()[i]);
  EXPECT_LT(head.draft_to_target().back(), vocab);
  const auto la = run_random(**a, *target.ops), lb = run_random(**b, *target.ops), lc = run_random(**c, *target.ops);
  EXPECT_EQ(la, lb);
  EXPECT_NE(la, lc);
  for (float x : la) ASSERT_TRUE(std::isfinite(x));
  EXPECT_FALSE(model::random_eagle3_head(*target.model, *target.ops, 1, {.draft_vocab = vocab + 1}).ok());
  EXPECT_FALSE(model::random_eagle3_head(*target.model, *target.ops, 1, {.capture_layers = {0, 1, 3}}).ok());
}

class Eagle3RandomHeadFamilies : public ::testing::TestWithParam<std::string> {};

TEST_P(Eagle3RandomHeadFamilies, RunsOnEveryFixture) {
  Target target = load_target(GetParam());
  ASSERT_TRUE(target.model);
  auto head = model::random_eagle3_head(*target.model, *target.ops, 1);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  EXPECT_EQ((*head)->vocab_size(), target.model->vocab_size());
  for (float x : run_random(**head, *target.ops)) ASSERT_TRUE(std::isfinite(x));
}

INSTANTIATE_TEST_SUITE_P(Eagle3, Eagle3RandomHeadFamilies, ::testing::Values("llama", "qwen3", "deepseek_v2", "gpt_oss"),
                         [](const auto& test) { return test.param; });

}  // namespace
}  // namespace drift::testing
