// Chained block hashes for the prefix cache: hash(parent hash, block tokens), rooted in the namespace.
// 64-bit and not cryptographic: a hash only finds a candidate, the tokens are compared before a hit is used.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace drift::core {

// Hash of a namespace string: the parent of a request's first block.
uint64_t namespace_hash(std::string_view name);
// Hash of one full block given its parent's hash.
uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens);

}  // namespace drift::core
