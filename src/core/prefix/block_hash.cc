#include "core/prefix/block_hash.h"

namespace drift::core {
namespace {

// Final avalanche so that nearby inputs land far apart (the 64-bit finalizer of MurmurHash3).
uint64_t avalanche(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

uint64_t namespace_hash(std::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a over the bytes
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return avalanche(h ^ name.size());
}

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = avalanche(parent + 0x9e3779b97f4a7c15ULL);
  // Two tokens per round keeps a 16-token block at 8 multiply-rotate rounds.
  size_t i = 0;
  for (; i + 1 < tokens.size(); i += 2) {
    uint64_t pair = uint64_t(uint32_t(tokens[i])) | (uint64_t(uint32_t(tokens[i + 1])) << 32);
    h = rotl(h ^ (pair * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
  }
  if (i < tokens.size()) h = rotl(h ^ (uint64_t(uint32_t(tokens[i])) * 0x87c37b91114253d5ULL), 31) * 0x4cf5ad432745937fULL;
  return avalanche(h ^ tokens.size());
}

}  // namespace drift::core
