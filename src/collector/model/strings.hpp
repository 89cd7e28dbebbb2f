// Interned strings: each distinct string is stored once and named by a dense 32-bit id.
// Views stay valid for the table's lifetime (storage grows in blocks, never moves).
#pragma once

#include "collector/model/dense_index.hpp"

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace collector {

// A fast non-cryptographic hash over 8-byte words (strings here are symbol names and paths).
std::uint64_t hash_bytes(std::string_view s, std::uint64_t seed = 0) noexcept;

class string_table {
public:
    string_table();
    std::uint32_t intern(std::string_view s);
    std::uint32_t intern(std::string_view s, std::uint64_t hash);
    std::string_view operator[](std::uint32_t id) const noexcept { return strings_[id]; }
    std::size_t size() const noexcept { return strings_.size(); }
    std::size_t memory_bytes() const noexcept;

private:
    std::string_view store(std::string_view s);

    std::vector<std::unique_ptr<char[]>> blocks_;
    std::size_t block_used_ = 0, block_size_ = 0;
    std::vector<std::string_view> strings_;
    std::vector<std::uint64_t> hashes_;
    dense_index index_;
};

} // namespace collector
