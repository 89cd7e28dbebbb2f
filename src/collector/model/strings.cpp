#include "collector/model/strings.hpp"

#include <cstring>

namespace collector {

std::uint64_t hash_bytes(std::string_view s, std::uint64_t seed) noexcept {
    constexpr std::uint64_t k = 0x9E3779B97F4A7C15ULL;
    std::uint64_t h = seed ^ (s.size() * k);
    const char* p = s.data();
    std::size_t n = s.size();
    while (n >= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        h = (h ^ w) * k;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    if (n) {
        std::uint64_t w = 0;
        std::memcpy(&w, p, n);
        h = (h ^ w) * k;
        h ^= h >> 29;
    }
    h *= 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
}

string_table::string_table() = default;

std::string_view string_table::store(std::string_view s) {
    if (block_used_ + s.size() > block_size_) {
        block_size_ = std::max<std::size_t>(64 << 10, s.size());
        blocks_.push_back(std::make_unique<char[]>(block_size_));
        block_used_ = 0;
    }
    char* dst = blocks_.back().get() + block_used_;
    std::memcpy(dst, s.data(), s.size());
    block_used_ += s.size();
    return {dst, s.size()};
}

std::uint32_t string_table::intern(std::string_view s) {
    return intern(s, hash_bytes(s));
}

std::uint32_t string_table::intern(std::string_view s, std::uint64_t hash) {
    const auto found = index_.find(
        hash, [&](std::uint32_t id) { return hashes_[id] == hash && strings_[id] == s; });
    if (found.id != dense_index::none)
        return found.id;
    const auto id = static_cast<std::uint32_t>(strings_.size());
    strings_.push_back(store(s));
    hashes_.push_back(hash);
    index_.insert(found.slot, id, [this](std::uint32_t i) { return hashes_[i]; });
    return id;
}

std::size_t string_table::memory_bytes() const noexcept {
    return blocks_.size() * block_size_ + strings_.capacity() * sizeof(std::string_view) +
           hashes_.capacity() * 8 + index_.memory_bytes();
}

} // namespace collector
