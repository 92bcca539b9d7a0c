// The per-request random stream: counter-based, so the draw for output position i depends only on
// (seed, i). A request therefore samples the same tokens alone or in any batch, after preemption, and on
// a CUDA sampler, which can call cuRAND's curand_Philox4x32_10(counter, key) with the same words.
#pragma once

#include <cstdint>

namespace drift::sample {

struct PhiloxBlock {
  uint32_t w[4];
};

// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): ten rounds of
// the 4x32 bijection, the key bumped by the Weyl constants between rounds. Known-answer tests in
// tests/unit/sample/random_test.cc pin it to Random123's kat_vectors.
constexpr PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  PhiloxBlock c = counter;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    const uint64_t p0 = uint64_t(kMul0) * c.w[0];
    const uint64_t p1 = uint64_t(kMul1) * c.w[2];
    c = PhiloxBlock{{uint32_t(p1 >> 32) ^ c.w[1] ^ key0, uint32_t(p1), uint32_t(p0 >> 32) ^ c.w[3] ^ key1,
                     uint32_t(p0)}};
  }
  return c;
}

// The uniform that draws output position `position` of a request seeded with `seed`:
// key = {seed low 32 bits, seed high 32 bits}, counter = {position low, position high, 0, 0}, and the top
// 24 bits of output word 0 scaled by 2^-24, which gives a float in [0, 1) with every value exactly
// representable. Counter words 2 and 3 stay zero here; other per-position draws (speculative acceptance)
// can use them without disturbing this stream.
constexpr float uniform_for(uint64_t seed, uint64_t position) {
  const PhiloxBlock out =
      philox4x32_10(PhiloxBlock{{uint32_t(position), uint32_t(position >> 32), 0u, 0u}}, uint32_t(seed),
                    uint32_t(seed >> 32));
  return float(out.w[0] >> 8) * 0x1p-24f;
}

}  // namespace drift::sample
