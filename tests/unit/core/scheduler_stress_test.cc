// Thousands of requests through the scheduler with a fake executor: no model, the next token is a pure
// function of the previous token and its position, and a simulated KV store records which (position,
// token) each block slot holds. The executor checks every step that a request reads back its own tokens
// from its block table, and never writes into a block another request holds. At the end every request
// must have finished exactly once, with the output and reason it would have had alone, and every block
// must be free.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <unordered_map>

#include "core/sched/scheduler.h"
#include "core_test_util.h"

namespace drift::core {
namespace {

using namespace testing;  // NOLINT: test helpers

constexpr int32_t kVocab = 61;
constexpr int32_t kStopToken = 0;
constexpr uint64_t kEmpty = ~uint64_t{0};

int32_t next_token(int32_t prev, int32_t position) {
  uint32_t h = uint32_t(prev) * 2654435761u ^ uint32_t(position) * 40503u;
  h ^= h >> 15;
  return int32_t(h % kVocab);
}

struct StressCase {
  const char* name;
  AdmissionPolicy admission;
  bool prefix_cache;
  int32_t window;   // > 0 adds a sliding-window group beside the full one
  bool speculate;   // drafts + rollback
  int32_t window_pool = 0;  // blocks of the sliding group's pool; 0: as many as the full group's
  uint32_t seed = 1234;
};

struct Expected {
  std::vector<int32_t> output;
  FinishReason reason = FinishReason::kNone;
};

struct Tracked {
  Expected expected;
  bool aborted = false;      // abort() accepted
  int32_t num_endings = 0;   // finish() accepted + reported in finished_aborted
  std::vector<int32_t> output;
  FinishReason reason = FinishReason::kNone;
};

class FakeEngine {
 public:
  FakeEngine(const StressCase& c, uint32_t seed) : case_(c), rng_(seed) {
    config_.max_num_batched_tokens = 192;
    config_.max_num_seqs = 24;
    config_.max_num_partial_prefills = 2;
    config_.long_prefill_token_threshold = 96;
    config_.admission = c.admission;
    config_.enable_prefix_cache = c.prefix_cache;
    config_.max_model_len = 320;
    config_.starvation_limit_steps = 200;
    kv_.block_size = 16;
    kv_.num_blocks = {72};  // 1152 tokens: a handful of requests at a time
    kv_.groups = {gqa_group("full")};
    if (c.window > 0) {
      kv_.groups.push_back(gqa_group("sliding", c.window));
      kv_.num_blocks.push_back(c.window_pool > 0 ? c.window_pool : 72);
    }
    sched_ = std::make_unique<Scheduler>(config_, kv_);
    for (int32_t blocks : kv_.num_blocks) store_.emplace_back(size_t(blocks) * kv_.block_size, kEmpty);
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> prefix(16 * (1 + rng_() % 6));
      for (int32_t& t : prefix) t = 1 + int32_t(rng_() % (kVocab - 1));
      shared_prefixes_.push_back(prefix);
    }
  }

  void run(int32_t num_requests) {
    int32_t added = 0;
    int64_t step = 0;
    while (added < num_requests || sched_->num_sequences() > 0) {
      ASSERT_LT(step, 200000) << "no progress";
      for (int i = 0; i < 3 && added < num_requests; ++i) {
        if (rng_() % 3 == 0) add_request(added++);
      }
      if (rng_() % 25 == 0) abort_random();
      ASSERT_NO_FATAL_FAILURE(one_step());
      if (++step % 100 == 0) {
        ASSERT_TRUE(sched_->check_invariants().ok()) << sched_->check_invariants().message();
      }
    }
    check_end(num_requests);
  }

 private:
  void add_request(SeqId id) {
    std::vector<int32_t> prompt;
    if (rng_() % 3 != 0) prompt = shared_prefixes_[rng_() % shared_prefixes_.size()];
    int32_t extra = 1 + int32_t(rng_() % 120);
    for (int32_t i = 0; i < extra; ++i) prompt.push_back(1 + int32_t(rng_() % (kVocab - 1)));
    int32_t max_tokens = 1 + int32_t(rng_() % 64);
    if (rng_() % 50 == 0) max_tokens = 2000;  // capped by max_model_len, or rejected
    Sequence seq = make_seq(id, prompt, max_tokens, int32_t(rng_() % 3), rng_() % 8 == 0 ? "other" : "");

    Tracked t;
    int32_t limit = std::min<int32_t>(int32_t(prompt.size()) + max_tokens, config_.max_model_len);
    int32_t prev = prompt.back();
    for (auto pos = int32_t(prompt.size()); pos < limit; ++pos) {
      prev = next_token(prev, pos);
      t.expected.output.push_back(prev);
      if (prev == kStopToken) {
        t.expected.reason = FinishReason::kStop;
        break;
      }
    }
    if (t.expected.reason == FinishReason::kNone) t.expected.reason = FinishReason::kLength;

    Status st = sched_->add(std::move(seq));
    if (!st.ok()) {
      // Only requests that can never fit are refused, and the message says so.
      ASSERT_TRUE(st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kInvalidArgument) << st.to_string();
      ++rejected_;
      return;
    }
    tracked_.emplace(id, std::move(t));
  }

  void abort_random() {
    if (tracked_.empty()) return;
    auto it = std::next(tracked_.begin(), rng_() % std::min<size_t>(tracked_.size(), 64));
    if (it->second.num_endings > 0) return;
    Status st = sched_->abort(it->first);
    if (st.ok()) {
      it->second.aborted = true;
    } else {
      ASSERT_EQ(st.code(), StatusCode::kNotFound);  // finished already, waiting for its commit
    }
  }

  void end(SeqId id, FinishReason reason) {
    Tracked& t = tracked_.at(id);
    ++t.num_endings;
    t.reason = reason;
    const Sequence* seq = sched_->find(id);
    t.output.assign(seq->tokens.begin() + seq->num_prompt_tokens, seq->tokens.end());
  }

  void one_step() {
    BatchPlan plan = sched_->plan();
    for (SeqId id : plan.finished_aborted) {
      ASSERT_TRUE(tracked_.at(id).aborted);
      end(id, FinishReason::kAbort);
    }
    ASSERT_LE(plan.num_tokens, config_.max_num_batched_tokens);
    if (rng_() % 40 == 0) abort_random();  // between plan() and commit()
    sched_->commit(plan);
    if (config_.admission == AdmissionPolicy::kGuaranteed) {
      ASSERT_TRUE(plan.preempted.empty());
      ASSERT_EQ(plan.num_kv_shortfalls, 0);
    }
    for (const ScheduledSeq& s : plan.seqs) ASSERT_NO_FATAL_FAILURE(execute(s));
    sched_->on_step_done(plan);
    for (const ScheduledSeq& s : plan.seqs) {
      if (s.samples && !s.seq->abort_requested) {
        ASSERT_NO_FATAL_FAILURE(sample(*s.seq));
      }
    }
  }

  // Reads the context back from the block tables and writes this step's tokens, as attention would.
  void execute(const ScheduledSeq& s) {
    const Sequence& seq = *s.seq;
    int32_t bs = kv_.block_size;
    int32_t c = s.num_computed;
    bool full_check = c == seq.num_cached_tokens || rng_() % 16 == 0;
    for (int32_t g = 0; g < sched_->num_groups(); ++g) {
      const std::vector<int32_t>& table = seq.block_tables[g];
      ASSERT_GE(static_cast<int32_t>(table.size()), (c + s.num_new + bs - 1) / bs);
      int32_t window = kv_.groups[g].sliding_window;
      int32_t lo = window > 0 ? std::max(0, c - window) : (full_check ? 0 : std::max(0, c - bs));
      for (int32_t p = lo; p < c; ++p) {
        int32_t block = table[p / bs];
        ASSERT_NE(block, kNoBlock) << "group " << g << " lost position " << p << " of request " << seq.seq_id;
        uint64_t want = (uint64_t(p) << 32) | uint32_t(seq.tokens[p]);
        ASSERT_EQ(store_[g][size_t(block) * bs + p % bs], want)
            << "group " << g << " request " << seq.seq_id << " reads a wrong KV at position " << p;
      }
      for (int32_t p = c; p < c + s.num_new; ++p) {
        int32_t block = table[p / bs];
        ASSERT_NE(block, kNoBlock);
        ASSERT_EQ(sched_->pool(g).refcount(block), 1) << "write into a shared block";
        store_[g][size_t(block) * bs + p % bs] = (uint64_t(p) << 32) | uint32_t(seq.tokens[p]);
      }
    }
  }

  // The engine after a step that reached the end of a request's tokens: verify drafts, sample, finish.
  void sample(const Sequence& seq) {
    SeqId id = seq.seq_id;
    int32_t max_length = sched_->max_length(seq);
    auto finished_at = [&](int32_t length) {  // the request is done once its token at length - 1 exists
      if (seq.tokens[length - 1] == kStopToken) return FinishReason::kStop;
      return length >= max_length ? FinishReason::kLength : FinishReason::kNone;
    };
    int32_t length = seq.num_tokens();
    int32_t drafts = seq.num_draft_tokens;
    if (drafts > 0) {
      int32_t keep = length - drafts;  // verified tokens
      FinishReason done = FinishReason::kNone;
      while (keep < length && done == FinishReason::kNone && seq.tokens[keep] == next_token(seq.tokens[keep - 1], keep)) {
        ++keep;
        done = finished_at(keep);
      }
      ASSERT_TRUE(sched_->rollback(id, keep, keep).ok());
      if (done != FinishReason::kNone) {
        end(id, done);
        ASSERT_TRUE(sched_->finish(id, done).ok());
        return;
      }
      length = keep;
    }
    sched_->append_token(id, next_token(seq.tokens[length - 1], length));
    FinishReason done = finished_at(length + 1);
    if (done != FinishReason::kNone) {
      end(id, done);
      ASSERT_TRUE(sched_->finish(id, done).ok());
      return;
    }
    if (case_.speculate) {
      int32_t k = std::min<int32_t>(int32_t(rng_() % 4), max_length - seq.num_tokens());
      std::vector<int32_t> proposal;
      int32_t prev = seq.tokens.back();
      for (int32_t i = 0; i < k; ++i) {
        int32_t truth = next_token(prev, seq.num_tokens() + i);
        int32_t draft = rng_() % 10 < 7 ? truth : (truth + 1) % kVocab;
        proposal.push_back(draft);
        prev = draft;
      }
      sched_->append_draft_tokens(id, proposal);
    }
  }

  void check_end(int32_t num_requests) {
    EXPECT_GT(tracked_.size(), size_t(num_requests) * 9 / 10);
    int32_t num_aborted = 0;
    for (const auto& [id, t] : tracked_) {
      ASSERT_EQ(t.num_endings, 1) << "request " << id;
      if (t.aborted) {
        ++num_aborted;
        ASSERT_EQ(t.reason, FinishReason::kAbort) << "request " << id;
        continue;
      }
      ASSERT_EQ(t.reason, t.expected.reason) << "request " << id;
      ASSERT_EQ(t.output, t.expected.output) << "request " << id;
    }
    EXPECT_GT(num_aborted, 0);
    EXPECT_EQ(sched_->num_sequences(), 0);
    EXPECT_EQ(sched_->num_waiting(), 0);
    EXPECT_EQ(sched_->num_running(), 0);
    for (int32_t g = 0; g < sched_->num_groups(); ++g) {
      EXPECT_EQ(sched_->pool(g).num_free(), kv_.num_blocks[g]);
      for (int32_t b = 0; b < kv_.num_blocks[g]; ++b) ASSERT_EQ(sched_->pool(g).refcount(b), 0);
    }
    ASSERT_TRUE(sched_->check_invariants().ok()) << sched_->check_invariants().message();
    const SchedulerMetrics& m = sched_->metrics();
    EXPECT_EQ(m.kv_shortfalls, 0);
    if (config_.admission == AdmissionPolicy::kGuaranteed) {
      EXPECT_EQ(m.preemptions, 0);
    } else {
      EXPECT_GT(m.preemptions, 0) << "capacity was not tight enough to exercise preemption";
    }
    if (config_.enable_prefix_cache) {
      EXPECT_GT(sched_->prefix_cache().metrics().hit_tokens, 0);
      EXPECT_GT(sched_->prefix_cache().metrics().evictions, 0);
    }
    ::testing::Test::RecordProperty("aborted", num_aborted);
    ::testing::Test::RecordProperty("rejected", rejected_);
    ::testing::Test::RecordProperty("preemptions", int(m.preemptions));
    ::testing::Test::RecordProperty("steps", int(m.steps));
  }

  StressCase case_;
  std::mt19937 rng_;
  SchedulerConfig config_;
  KvConfig kv_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::vector<uint64_t>> store_;  // [group][block * block_size + slot]: position << 32 | token
  std::vector<std::vector<int32_t>> shared_prefixes_;
  std::unordered_map<SeqId, Tracked> tracked_;
  int32_t rejected_ = 0;
};

class SchedulerStress : public ::testing::TestWithParam<StressCase> {};

TEST_P(SchedulerStress, EveryRequestEndsOnceWithItsOwnOutput) {
  FakeEngine engine(GetParam(), GetParam().seed);
  engine.run(/*num_requests=*/2500);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SchedulerStress,
    ::testing::Values(StressCase{"guaranteed", AdmissionPolicy::kGuaranteed, false, 0, false},
                      StressCase{"guaranteed_prefix", AdmissionPolicy::kGuaranteed, true, 0, false},
                      StressCase{"optimistic", AdmissionPolicy::kOptimistic, false, 0, false},
                      StressCase{"optimistic_prefix", AdmissionPolicy::kOptimistic, true, 0, false},
                      StressCase{"guaranteed_prefix_sliding", AdmissionPolicy::kGuaranteed, true, 40, false},
                      StressCase{"optimistic_prefix_sliding", AdmissionPolicy::kOptimistic, true, 40, false},
                      StressCase{"guaranteed_prefix_speculate", AdmissionPolicy::kGuaranteed, true, 0, true},
                      StressCase{"optimistic_prefix_sliding_speculate", AdmissionPolicy::kOptimistic, true, 40, true},
                      // A sliding pool far smaller than the full one (a request holds at most
                      // max_blocks_held(40, ...) = 16 blocks of it): admission and preemption must count it
                      // on its own. The optimistic seeds ran a commit that applied prefix hits before the
                      // window drops of the same step out of blocks.
                      StressCase{"guaranteed_prefix_small_window_pool", AdmissionPolicy::kGuaranteed, true, 40, false, 36},
                      StressCase{"guaranteed_prefix_small_window_pool_speculate", AdmissionPolicy::kGuaranteed, true, 40, true, 36},
                      StressCase{"optimistic_prefix_small_window_pool", AdmissionPolicy::kOptimistic, true, 40, false, 20, 1},
                      StressCase{"optimistic_prefix_small_window_pool_speculate", AdmissionPolicy::kOptimistic, true, 40, true, 24, 1}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace drift::core
