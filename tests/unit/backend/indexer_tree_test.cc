// DSA-lite's indexer over draft trees on the CPU backend (ops.h, IndexerTopkParams): a tree query sees its
// context and the new tokens its mask row marks, and keeps the sinks, the last local_window of what it sees
// and the best-scoring rest. Checked against a reference that reads the rule from the tree itself (the
// parents, never the mask) over random trees, sink counts, windows and top-k around the number of positions
// a query sees, in steps that mix trees with chains longer than the mask's bits; and, the property the
// engine relies on, a tree query keeps what the chain of its accepted path keeps once that path sits in
// the cache in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "backend/ops.h"

namespace drift::backend {
namespace {

constexpr int32_t kBlock = 4, kHeads = 2, kDim = 3, kNumBlocks = 64;

struct Rule {
  int32_t top_k = 0, sinks = 0, window = 1;
};

// One sequence of a step: `context` tokens already cached, then its new tokens: `chain` rows (each sees
// the rows before it) and, when `parents` is not empty, tree nodes after them (parent -1: the last chain
// row, the root). A sequence without nodes is a plain chain.
struct SeqCase {
  int32_t context = 0, chain = 1;
  std::vector<int32_t> parents;
  std::vector<int32_t> table;  // physical block of each logical block

  int32_t num_new() const { return chain + int32_t(parents.size()); }
  int32_t length() const { return context + num_new(); }
  // The cache positions new row i sees, from the definition: the context, every chain row up to i, and
  // for a node its ancestors (through the root's chain) and itself.
  std::vector<int32_t> seen(int32_t i) const {
    std::set<int32_t> s;
    for (int32_t p = 0; p < context; ++p) s.insert(p);
    for (int32_t r = 0; r < std::min(i + 1, chain); ++r) s.insert(context + r);
    for (int32_t node = i - chain; node >= 0; node = parents[size_t(node)]) s.insert(context + chain + node);
    return {s.begin(), s.end()};
  }
};

// The rule read literally: every position it sees when that is at most top_k; else the sinks, the window
// and each other position that fewer than the room left are strictly better than (higher score, or the
// same score at a lower position).
std::vector<int32_t> reference_choice(const std::vector<int32_t>& seen, const std::vector<double>& score,
                                      const Rule& rule) {
  if (seen.size() <= size_t(rule.top_k)) return seen;
  std::set<int32_t> chosen;
  std::vector<int32_t> others;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (seen[i] < rule.sinks || i + size_t(rule.window) >= seen.size()) {
      chosen.insert(seen[i]);
    } else {
      others.push_back(seen[i]);
    }
  }
  const size_t room = size_t(rule.top_k) - chosen.size();
  for (int32_t c : others) {
    size_t better = 0;
    for (int32_t d : others)
      better += score[size_t(d)] > score[size_t(c)] || (score[size_t(d)] == score[size_t(c)] && d < c);
    if (better < room) chosen.insert(c);
  }
  return {chosen.begin(), chosen.end()};
}

double score_of(const float* q, const float* w, const float* key) {
  double score = 0.0;
  for (int32_t j = 0; j < kHeads; ++j) {
    double dot = 0.0;
    for (int32_t d = 0; d < kDim; ++d) dot += double(q[j * kDim + d]) * key[d];
    score += double(w[j]) * std::max(dot, 0.0);
  }
  return score;
}

Buffer upload(Ops& ops, DType dtype, std::initializer_list<int64_t> shape, const void* data) {
  Buffer b = ops.alloc(dtype, shape);
  ops.copy_from_host(b.view, data);
  return b;
}

// A step's inputs, host side: keys[seq][position], one query row (q, w) per new token.
struct Step {
  std::vector<SeqCase> seqs;
  std::vector<std::vector<std::vector<float>>> keys;  // [seq][position] -> [kDim]
  std::vector<float> q, w;                            // [rows, kHeads, kDim], [rows, kHeads]
  bool tree_mask = true;
};

// Runs indexer_topk over the step; returns each row's kept positions (the -1 tail dropped).
std::vector<std::vector<int32_t>> run_indexer(const Step& step, const Rule& rule) {
  auto ops = make_cpu_ops();
  int32_t rows = 0, max_blocks = 1, words = 1;
  for (const SeqCase& s : step.seqs) {
    rows += s.num_new();
    max_blocks = std::max(max_blocks, int32_t(s.table.size()));
    if (!s.parents.empty()) words = std::max(words, (s.num_new() + 31) / 32);
  }
  std::vector<float> cache(size_t(kNumBlocks * kBlock * kDim), 0.0f);
  std::vector<int32_t> tables(step.seqs.size() * size_t(max_blocks), -1), query_start{0}, lens, positions;
  std::vector<uint32_t> mask;
  for (size_t k = 0; k < step.seqs.size(); ++k) {
    const SeqCase& s = step.seqs[k];
    std::copy(s.table.begin(), s.table.end(), tables.begin() + int64_t(k) * max_blocks);
    for (int32_t p = 0; p < s.length(); ++p)
      std::copy_n(step.keys[k][size_t(p)].data(), kDim,
                  &cache[size_t((s.table[size_t(p / kBlock)] * kBlock + p % kBlock) * kDim)]);
    for (int32_t i = 0; i < s.num_new(); ++i) {
      // Tree rows get their RoPE position (context + depth), which the op must not read as a cache position.
      const std::vector<int32_t> seen = s.seen(i);
      const int32_t depth = int32_t(seen.size()) - s.context - s.chain;  // of a node below the root
      positions.push_back(i < s.chain ? s.context + i : s.context + s.chain - 1 + depth);
      std::vector<uint32_t> row(size_t(words), 0u);
      // A chain row marks every earlier new token within the mask's bits, as the runner packs it.
      for (int32_t p : seen)
        if (p >= s.context && p - s.context < 32 * words) row[size_t((p - s.context) / 32)] |= 1u << ((p - s.context) % 32);
      mask.insert(mask.end(), row.begin(), row.end());
    }
    query_start.push_back(query_start.back() + s.num_new());
    lens.push_back(s.length());
  }
  Buffer qb = upload(*ops, DType::kF32, {rows, kHeads, kDim}, step.q.data());
  Buffer wb = upload(*ops, DType::kF32, {rows, kHeads}, step.w.data());
  Buffer kb = upload(*ops, DType::kF32, {kNumBlocks, kBlock, 1, kDim}, cache.data());
  Buffer tb = upload(*ops, DType::kI32, {int64_t(step.seqs.size()), max_blocks}, tables.data());
  Buffer qs = upload(*ops, DType::kI32, {int64_t(query_start.size())}, query_start.data());
  Buffer cl = upload(*ops, DType::kI32, {int64_t(lens.size())}, lens.data());
  Buffer pb = upload(*ops, DType::kI32, {rows}, positions.data());
  Buffer mb = upload(*ops, DType::kU32, {rows, words}, mask.data());
  Buffer out = ops->alloc(DType::kI32, {rows, rule.top_k});
  IndexerTopkParams p{.q = qb.view, .head_weights = wb.view, .k_cache = kb.view, .block_tables = tb.view,
                      .query_start = qs.view, .context_lens = cl.view, .q_positions = pb.view,
                      .selected = out.view, .sink_tokens = rule.sinks, .local_window = rule.window};
  if (step.tree_mask) p.tree_mask = mb.view;
  ops->indexer_topk(p);
  std::vector<std::vector<int32_t>> kept(static_cast<size_t>(rows));
  for (int32_t t = 0; t < rows; ++t) {
    const int32_t* row = out.view.data_as<int32_t>() + int64_t(t) * rule.top_k;
    for (int32_t i = 0; i < rule.top_k; ++i) {
      if (i > 0 && row[i] >= 0) {
        EXPECT_GT(row[i], row[i - 1]) << "row " << t << ": ascending, -1 only at the end";
      }
      if (row[i] >= 0) kept[size_t(t)].push_back(row[i]);
    }
  }
  return kept;
}

// Random parents: node i hangs off the root (-1) or an earlier node.
std::vector<int32_t> random_tree(std::mt19937& rng, int32_t nodes) {
  std::vector<int32_t> parents(static_cast<size_t>(nodes));
  for (int32_t i = 0; i < nodes; ++i) parents[size_t(i)] = std::uniform_int_distribution<int32_t>(-1, i - 1)(rng);
  return parents;
}

// Physical blocks for each sequence, drawn without repeats from the pool.
void assign_tables(std::mt19937& rng, std::vector<SeqCase>& seqs) {
  std::vector<int32_t> pool(kNumBlocks);
  for (int32_t b = 0; b < kNumBlocks; ++b) pool[size_t(b)] = b;
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  for (SeqCase& s : seqs)
    for (int32_t b = 0; b < (s.length() + kBlock - 1) / kBlock; ++b) s.table.push_back(pool[next++]);
  ASSERT_LE(next, pool.size());
}

// Keys drawn from a pool of five vectors, so equal scores (ties) are common; queries and weights normal.
void fill_inputs(std::mt19937& rng, Step& step) {
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> pool(5, std::vector<float>(kDim));
  for (auto& key : pool)
    for (float& x : key) x = normal(rng);
  int32_t rows = 0;
  step.keys.clear();
  for (const SeqCase& s : step.seqs) {
    auto& keys = step.keys.emplace_back();
    for (int32_t p = 0; p < s.length(); ++p) keys.push_back(pool[rng() % pool.size()]);
    rows += s.num_new();
  }
  step.q.resize(size_t(rows * kHeads * kDim));
  step.w.resize(size_t(rows * kHeads));
  for (float& x : step.q) x = normal(rng);
  for (float& x : step.w) x = std::abs(normal(rng)) - 0.2f;
}

TEST(IndexerTrees, RandomTreesKeepWhatTheRuleKeeps) {
  std::mt19937 rng(11);
  int64_t rows_checked = 0, rows_pruned = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Step step;
    const int32_t num_seqs = 1 + int32_t(rng() % 3);
    for (int32_t k = 0; k < num_seqs; ++k) {
      SeqCase s;
      s.context = int32_t(rng() % 14);
      if (k == 1 && trial % 4 == 0) {
        s.chain = 33 + int32_t(rng() % 10);  // a chain past the first mask word beside trees of one word
      } else {
        s.chain = 1 + int32_t(rng() % 3);
        s.parents = random_tree(rng, 1 + int32_t(rng() % (trial % 5 == 0 ? 40 : 12)));
      }
      step.seqs.push_back(s);
    }
    assign_tables(rng, step.seqs);
    fill_inputs(rng, step);
    Rule rule;
    rule.sinks = int32_t(rng() % 4);
    rule.window = 1 + int32_t(rng() % 4);
    // Top-k around the number of positions a typical query sees: some rows keep all, most choose.
    const int32_t typical = step.seqs[0].context + step.seqs[0].chain + 3;
    rule.top_k = std::max(rule.sinks + rule.window + 1, typical - 4 + int32_t(rng() % 9));
    const auto kept = run_indexer(step, rule);
    int32_t t = 0;
    for (size_t k = 0; k < step.seqs.size(); ++k) {
      const SeqCase& s = step.seqs[k];
      for (int32_t i = 0; i < s.num_new(); ++i, ++t) {
        std::vector<double> score(size_t(s.length()));
        for (int32_t p = 0; p < s.length(); ++p)
          score[size_t(p)] = score_of(&step.q[size_t(t * kHeads * kDim)], &step.w[size_t(t * kHeads)], step.keys[k][size_t(p)].data());
        const std::vector<int32_t> seen = s.seen(i);
        ASSERT_EQ(kept[size_t(t)], reference_choice(seen, score, rule))
            << "trial " << trial << ", sequence " << k << ", new row " << i << " (context " << s.context << ", chain "
            << s.chain << ", " << s.parents.size() << " nodes), top_k " << rule.top_k << ", sinks " << rule.sinks
            << ", window " << rule.window;
        ++rows_checked;
        rows_pruned += seen.size() > size_t(rule.top_k);
      }
    }
  }
  // The trials must exercise the choice itself, not only queries that keep everything.
  EXPECT_GT(rows_pruned, rows_checked / 4) << rows_checked << " rows";
  EXPECT_LT(rows_pruned, rows_checked) << rows_checked << " rows";
}

// Chains without a tree mask in the step (q_positions as cache positions) keep what the rule keeps too,
// which the rows of the same chains in a step with a mask must match.
TEST(IndexerTrees, ChainsChooseAlikeWithAndWithoutAMask) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 40; ++trial) {
    Step step;
    for (int32_t k = 0; k < 2; ++k) step.seqs.push_back({.context = int32_t(rng() % 20), .chain = 1 + int32_t(rng() % 40)});
    assign_tables(rng, step.seqs);
    fill_inputs(rng, step);
    const Rule rule{.top_k = 6 + int32_t(rng() % 10), .sinks = int32_t(rng() % 3), .window = 1 + int32_t(rng() % 3)};
    step.tree_mask = false;
    const auto plain = run_indexer(step, rule);
    step.tree_mask = true;
    EXPECT_EQ(run_indexer(step, rule), plain) << "trial " << trial;
  }
}

// A tree query keeps, in tree cache positions, what the query of the same token keeps once its path is
// accepted: the chain context, root, ..., node, with the path's rows moved to consecutive positions.
TEST(IndexerTrees, TreeQueryKeepsWhatItsAcceptedChainKeeps) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    Step tree;
    tree.seqs.push_back({.context = int32_t(rng() % 16), .chain = 1 + int32_t(rng() % 2)});
    tree.seqs[0].parents = random_tree(rng, 2 + int32_t(rng() % 14));
    assign_tables(rng, tree.seqs);
    fill_inputs(rng, tree);
    const SeqCase& s = tree.seqs[0];
    const int32_t node_row = s.chain + int32_t(rng() % s.parents.size());
    const std::vector<int32_t> path = s.seen(node_row);  // context, chain rows, ancestors, the node
    const Rule rule{.top_k = std::max(4, int32_t(path.size()) - 2 - int32_t(rng() % 6)), .sinks = int32_t(rng() % 2),
                    .window = 1 + int32_t(rng() % 2)};

    // The accepted chain: the same keys at consecutive positions; its last row is the node's query.
    Step chain;
    chain.seqs.push_back({.context = s.context, .chain = int32_t(path.size()) - s.context});
    assign_tables(rng, chain.seqs);
    chain.keys.resize(1);
    for (int32_t p : path) chain.keys[0].push_back(tree.keys[0][size_t(p)]);
    const int32_t rows = chain.seqs[0].chain;
    chain.q.assign(size_t(rows * kHeads * kDim), 0.0f);
    chain.w.assign(size_t(rows * kHeads), 0.0f);
    std::copy_n(&tree.q[size_t(node_row * kHeads * kDim)], kHeads * kDim, &chain.q[size_t((rows - 1) * kHeads * kDim)]);
    std::copy_n(&tree.w[size_t(node_row * kHeads)], kHeads, &chain.w[size_t((rows - 1) * kHeads)]);

    const std::vector<std::vector<int32_t>> chain_kept = run_indexer(chain, rule);
    std::vector<int32_t> in_tree;
    for (int32_t c : chain_kept[size_t(rows - 1)]) in_tree.push_back(path[size_t(c)]);
    EXPECT_EQ(run_indexer(tree, rule)[size_t(node_row)], in_tree) << "trial " << trial;
  }
}

}  // namespace
}  // namespace drift::backend
