#include "attention_case.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/check.h"

namespace drift::testing {

namespace {

bool has_tree(const KeyCase& c) {
  return std::any_of(c.seqs.begin(), c.seqs.end(), [](const KeySeq& s) { return !s.parents.empty(); });
}
bool has_view(const KeyCase& c) {
  return std::any_of(c.seqs.begin(), c.seqs.end(), [](const KeySeq& s) { return !s.view.empty(); });
}

int32_t depth_of(const KeySeq& s, int32_t i) {
  int32_t d = 0;
  for (int32_t j = s.parents[size_t(i)]; j >= 0; j = s.parents[size_t(j)]) ++d;
  return d;
}

bool is_ancestor_or_self(const KeySeq& s, int32_t a, int32_t i) {
  for (int32_t j = i; j >= 0; j = s.parents[size_t(j)])
    if (j == a) return true;
  return false;
}

// Whether query i (a new token) of sequence s at q_pos sees position p: the definition, not the kernel's rule.
bool sees(const KeyCase& c, const KeySeq& s, int32_t i, int32_t q_pos, int32_t p) {
  if (p >= s.context_len) return false;
  if (!s.view.empty() && std::find(s.view.begin(), s.view.end(), p / int32_t(c.block_size)) == s.view.end()) return false;
  const int32_t tree_start = s.context_len - s.num_new;
  if (!s.parents.empty() && p >= tree_start) return is_ancestor_or_self(s, p - tree_start, i);
  return p <= q_pos && (c.sliding_window <= 0 || p > q_pos - c.sliding_window);
}

int32_t position_of(const KeySeq& s, int32_t i) {
  const int32_t tree_start = s.context_len - s.num_new;
  return s.parents.empty() ? tree_start + i : tree_start + depth_of(s, i);
}

template <class T>
backend::Buffer upload(backend::Ops& ops, DType dtype, const std::vector<T>& v, std::initializer_list<int64_t> shape) {
  backend::Buffer b = ops.alloc(dtype, shape);
  if (!v.empty()) ops.copy_from_host(b.view, v.data());
  return b;
}

// The cache as BF16 words (the values are already bf16-exact; NaN stays NaN).
std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]);
  return out;
}

}  // namespace

std::vector<int32_t> random_tree(int32_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> parents{-1};
  for (int32_t i = 1; i < n; ++i) parents.push_back(int32_t(rng() % uint64_t(i)));
  return parents;
}

std::vector<float> normal_values(size_t n, float stddev, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) {
    // Rounded to bf16 so that a bf16 backend sees exactly the same values.
    uint32_t bits;
    float f = normal(rng);
    std::memcpy(&bits, &f, 4);
    bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &bits, 4);
  }
  return v;
}

std::vector<KeyCase> key_cases() {
  const std::vector<int32_t> small_tree{-1, 0, 0, 1, 1, 2, 3, 3, 4, 5, 5, 6};
  std::vector<KeyCase> cases;
  cases.push_back({.name = "chain_explicit_positions", .seqs = {{70, 70}, {40, 1}, {300, 5}}});
  cases.push_back({.name = "chain_derived_positions", .seqs = {{70, 70}, {40, 1}, {300, 5}}, .explicit_positions = false});
  cases.push_back({.name = "chain_window", .seqs = {{90, 30}, {77, 1}}, .sliding_window = 20});
  cases.push_back({.name = "tree_branching", .seqs = {{50, 12, small_tree}}});
  cases.push_back({.name = "tree_with_chains", .seqs = {{40, 40}, {90, 12, small_tree}, {33, 1}}});
  cases.push_back({.name = "tree_two_mask_words", .seqs = {{120, 45, random_tree(45, 7)}, {64, 2}}});
  cases.push_back({.name = "tree_window_sinks", .seqs = {{150, 12, small_tree}, {60, 60}}, .sliding_window = 32, .sinks = true});
  cases.push_back({.name = "tree_of_one", .seqs = {{25, 1, {-1}}, {40, 1}}});
  cases.push_back({.name = "tree_head_dim_128", .head_dim = 128, .num_heads = 16, .num_kv_heads = 2,
                   .seqs = {{300, 20, random_tree(20, 3)}}});
  cases.push_back({.name = "view_decode", .seqs = {{200, 1, {}, {0, 3, 5, 12}}, {100, 1, {}, {1, 6}}}});
  cases.push_back({.name = "view_chain", .seqs = {{130, 4, {}, {0, 2, 7, 8}}}});
  cases.push_back({.name = "view_tree", .seqs = {{170, 12, small_tree, {0, 1, 4, 9, 10}}}});
  cases.push_back({.name = "view_beside_full_table", .seqs = {{180, 3, {}, {0, 5, 11}}, {70, 70}}});
  return cases;
}

KeyInputs build_inputs(const KeyCase& c, std::mt19937_64& rng) {
  KeyInputs in;
  in.num_seqs = int64_t(c.seqs.size());
  const int64_t bs = c.block_size;
  int64_t blocks_used = 0, widest = 0;
  for (const KeySeq& s : c.seqs) {
    in.num_tokens += s.num_new;
    const int64_t blocks = (s.context_len + bs - 1) / bs;
    blocks_used += blocks;
    widest = std::max(widest, blocks);
  }
  in.num_blocks = blocks_used + 5;
  in.width = widest + 2;
  in.scale = float(1.0 / std::sqrt(double(c.head_dim)));

  // Scattered physical blocks; unused table entries point at a spare block that stays NaN.
  std::vector<int32_t> pool(size_t(in.num_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const int32_t spare = pool.back();
  std::vector<std::vector<int32_t>> full_tables;
  size_t next = 0;
  for (const KeySeq& s : c.seqs) {
    std::vector<int32_t> table;
    for (int64_t b = 0; b < (s.context_len + bs - 1) / bs; ++b) table.push_back(pool[next++]);
    full_tables.push_back(table);
  }
  const bool view = has_view(c), tree = has_tree(c);
  in.block_tables.assign(size_t(in.num_seqs * in.width), spare);
  if (view) in.block_positions.assign(size_t(in.num_seqs * in.width), 0);
  in.query_start.push_back(0);
  for (int64_t si = 0; si < in.num_seqs; ++si) {
    const KeySeq& s = c.seqs[size_t(si)];
    std::vector<int32_t> listed = s.view;
    if (listed.empty()) {
      listed.resize(full_tables[size_t(si)].size());
      std::iota(listed.begin(), listed.end(), 0);
    }
    if (!view) listed.resize(full_tables[size_t(si)].size());
    for (size_t i = 0; i < listed.size(); ++i) {
      in.block_tables[size_t(si * in.width) + i] = full_tables[size_t(si)][size_t(listed[i])];
      if (view) in.block_positions[size_t(si * in.width) + i] = listed[i];
    }
    if (view) in.view_blocks.push_back(int32_t(listed.size()));
    in.query_start.push_back(in.query_start.back() + s.num_new);
    in.context_lens.push_back(s.context_len);
    for (int32_t i = 0; i < s.num_new; ++i) in.q_positions.push_back(position_of(s, i));
  }

  // Tree masks: ancestor-or-self bits for trees, every earlier new token for chains (as the runner packs them).
  if (tree) {
    int32_t widest_tree = 1;
    for (const KeySeq& s : c.seqs)
      if (!s.parents.empty()) widest_tree = std::max(widest_tree, s.num_new);
    in.mask_words = (widest_tree + 31) / 32;
    for (const KeySeq& s : c.seqs)
      for (int32_t i = 0; i < s.num_new; ++i)
        for (int64_t w = 0; w < in.mask_words; ++w) {
          uint32_t word = 0;
          for (int32_t b = 0; b < 32; ++b) {
            const int32_t j = int32_t(w) * 32 + b;
            if (j >= s.num_new) break;
            const bool bit = s.parents.empty() ? j <= i : is_ancestor_or_self(s, j, i);
            if (bit) word |= 1u << b;
          }
          in.tree_mask.push_back(word);
        }
  }

  // Keys and values; every slot no query sees is NaN.
  const int64_t row = c.num_kv_heads * c.head_dim;
  in.k_cache = normal_values(size_t(in.num_blocks * bs * row), 1.0f, rng);
  in.v_cache = normal_values(in.k_cache.size(), 1.0f, rng);
  std::vector<bool> readable(size_t(in.num_blocks * bs), false);
  size_t t = 0;
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const KeySeq& s = c.seqs[si];
    for (int32_t i = 0; i < s.num_new; ++i, ++t)
      for (int32_t p = 0; p < s.context_len; ++p)
        if (sees(c, s, i, in.q_positions[t], p))
          readable[size_t(full_tables[si][size_t(p / bs)] * bs + p % bs)] = true;
  }
  for (size_t slot = 0; slot < readable.size(); ++slot)
    if (!readable[slot])
      for (int64_t i = 0; i < row; ++i) in.k_cache[slot * size_t(row) + size_t(i)] = in.v_cache[slot * size_t(row) + size_t(i)] = NAN;
  in.q = normal_values(size_t(in.num_tokens * c.num_heads * c.head_dim), 1.0f, rng);
  in.sinks = normal_values(size_t(c.num_heads), 2.0f, rng);

  in.full_tables = std::move(full_tables);
  return in;
}

backend::PagedAttentionParams KeyBuffers::params(const KeyCase& c, const KeyInputs& in) const {
  backend::PagedAttentionParams p;
  p.q = q.view;
  p.k_cache = k_cache.view;
  p.v_cache = v_cache.view;
  p.out = out.view;
  p.block_tables = block_tables.view;
  p.query_start = query_start.view;
  p.context_lens = context_lens.view;
  if (c.explicit_positions || in.mask_words > 0) p.q_positions = q_positions.view;
  if (in.mask_words > 0) p.tree_mask = tree_mask.view;
  if (!in.view_blocks.empty()) {
    p.block_positions = block_positions.view;
    p.view_blocks = view_blocks.view;
  }
  if (c.sinks) p.sinks = sinks.view;
  p.k_scale = k_scale.view;
  p.v_scale = v_scale.view;
  p.scale = in.scale;
  p.sliding_window = c.sliding_window;
  for (const KeySeq& s : c.seqs) p.max_query_len = std::max(p.max_query_len, s.num_new);
  return p;
}

std::pair<KeyCase, KeyInputs> copy_of_blocks(const KeyCase& c, const KeyInputs& in, const std::vector<int32_t>& listed) {
  const KeySeq& s = c.seqs.at(0);
  const int32_t bs = int32_t(c.block_size), last_fill = s.context_len - listed.back() * bs;
  DRIFT_CHECK(c.seqs.size() == 1 && last_fill > 0 && last_fill <= bs, "copy_of_blocks: one sequence, ending in the last block");
  KeyCase copy = c;
  copy.name = c.name + "_copy";
  copy.seqs[0] = KeySeq{.context_len = int32_t(listed.size() - 1) * bs + last_fill, .num_new = s.num_new, .parents = s.parents};
  copy.explicit_positions = false;  // the copy's positions are compacted; the chain's derived ones are too
  std::mt19937_64 rng(1);
  KeyInputs copied = build_inputs(copy, rng);
  copied.q = in.q;
  copied.sinks = in.sinks;
  const int64_t block_elems = bs * c.num_kv_heads * c.head_dim;
  for (size_t i = 0; i < listed.size(); ++i) {
    const int64_t from = int64_t(in.full_tables[0][size_t(listed[i])]) * block_elems;
    const int64_t to = int64_t(copied.full_tables[0][i]) * block_elems;
    std::copy_n(in.k_cache.begin() + from, block_elems, copied.k_cache.begin() + to);
    std::copy_n(in.v_cache.begin() + from, block_elems, copied.v_cache.begin() + to);
  }
  return {copy, copied};
}

Fp8Cache quantize_fp8_cache(const std::vector<float>& cache, int64_t row) {
  Fp8Cache q;
  const size_t rows = cache.size() / size_t(row);
  q.codes.resize(cache.size());
  q.scales.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    const float* x = cache.data() + r * size_t(row);
    q.scales[r] = f32_row_to_f8e4m3(x, row, q.codes.data() + r * size_t(row));
    if (std::any_of(x, x + row, [](float v) { return std::isnan(v); })) q.scales[r] = NAN;
  }
  return q;
}

std::vector<float> Fp8Cache::dequantized(int64_t row) const {
  std::vector<float> out(codes.size());
  for (size_t i = 0; i < codes.size(); ++i) out[i] = f8e4m3_to_f32(codes[i]) * scales[i / size_t(row)];
  return out;
}

std::vector<float> run_cpu_attention(const KeyCase& c, const KeyInputs& in, DType cache_dtype) {
  auto ops = backend::make_cpu_ops();
  const int64_t t = in.num_tokens, h = c.num_heads, d = c.head_dim, hk = c.num_kv_heads;
  KeyBuffers b;
  b.q = upload(*ops, DType::kF32, in.q, {t, h, d});
  const std::initializer_list<int64_t> cache_shape{in.num_blocks, c.block_size, hk, d};
  if (cache_dtype == DType::kF8E4M3) {
    const std::initializer_list<int64_t> scale_shape{in.num_blocks, c.block_size, hk};
    const Fp8Cache k8 = quantize_fp8_cache(in.k_cache, d), v8 = quantize_fp8_cache(in.v_cache, d);
    b.k_cache = upload(*ops, DType::kF8E4M3, k8.codes, cache_shape);
    b.v_cache = upload(*ops, DType::kF8E4M3, v8.codes, cache_shape);
    b.k_scale = upload(*ops, DType::kF32, k8.scales, scale_shape);
    b.v_scale = upload(*ops, DType::kF32, v8.scales, scale_shape);
  } else {
    b.k_cache = cache_dtype == DType::kBF16 ? upload(*ops, DType::kBF16, to_bf16(in.k_cache), cache_shape)
                                            : upload(*ops, DType::kF32, in.k_cache, cache_shape);
    b.v_cache = cache_dtype == DType::kBF16 ? upload(*ops, DType::kBF16, to_bf16(in.v_cache), cache_shape)
                                            : upload(*ops, DType::kF32, in.v_cache, cache_shape);
  }
  b.block_tables = upload(*ops, DType::kI32, in.block_tables, {in.num_seqs, in.width});
  b.query_start = upload(*ops, DType::kI32, in.query_start, {in.num_seqs + 1});
  b.context_lens = upload(*ops, DType::kI32, in.context_lens, {in.num_seqs});
  b.q_positions = upload(*ops, DType::kI32, in.q_positions, {t});
  b.tree_mask = upload(*ops, DType::kU32, in.tree_mask, {t, std::max<int64_t>(in.mask_words, 1)});
  b.block_positions = upload(*ops, DType::kI32, in.block_positions, {in.num_seqs, in.width});
  b.view_blocks = upload(*ops, DType::kI32, in.view_blocks, {in.num_seqs});
  b.sinks = upload(*ops, DType::kF32, in.sinks, {h});
  b.out = ops->alloc(DType::kF32, {t, h, d});
  std::fill_n(b.out.view.data_as<float>(), b.out.view.numel(), NAN);
  const backend::PagedAttentionParams p = b.params(c, in);
  ops->paged_attention(p);
  return std::vector<float>(b.out.view.data_as<float>(), b.out.view.data_as<float>() + b.out.view.numel());
}

std::vector<float> reference_attention(const KeyCase& c, const KeyInputs& in) {
  const int64_t h_count = c.num_heads, d = c.head_dim, bs = c.block_size, group = c.num_heads / c.num_kv_heads;
  const int64_t row = c.num_kv_heads * d;
  std::vector<float> out(size_t(in.num_tokens * h_count * d), 0.0f);
  size_t t = 0;
  for (size_t si = 0; si < c.seqs.size(); ++si) {
    const KeySeq& s = c.seqs[si];
    for (int32_t i = 0; i < s.num_new; ++i, ++t) {
      const int32_t q_pos = in.q_positions[t];
      for (int64_t h = 0; h < h_count; ++h) {
        const float* q = in.q.data() + (int64_t(t) * h_count + h) * d;
        std::vector<double> scores;
        std::vector<const float*> values;
        for (int32_t p = 0; p < s.context_len; ++p) {
          if (!sees(c, s, i, q_pos, p)) continue;
          const int64_t slot = int64_t(in.full_tables[si][size_t(p / bs)]) * bs + p % bs;
          const float* k = in.k_cache.data() + slot * row + (h / group) * d;
          double dot = 0.0;
          for (int64_t j = 0; j < d; ++j) dot += double(q[j]) * k[j];
          scores.push_back(dot * in.scale);
          values.push_back(in.v_cache.data() + slot * row + (h / group) * d);
        }
        double mx = c.sinks ? double(in.sinks[size_t(h)]) : -INFINITY;
        for (double sc : scores) mx = std::max(mx, sc);
        double denom = c.sinks ? std::exp(double(in.sinks[size_t(h)]) - mx) : 0.0;
        for (double& sc : scores) denom += (sc = std::exp(sc - mx));
        float* o = out.data() + (int64_t(t) * h_count + h) * d;
        for (int64_t j = 0; j < d; ++j) {
          double acc = 0.0;
          for (size_t k = 0; k < scores.size(); ++k) acc += scores[k] / denom * values[k][j];
          o[j] = float(acc);
        }
      }
    }
  }
  return out;
}

}  // namespace drift::testing
