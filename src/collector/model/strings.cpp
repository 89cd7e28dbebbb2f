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

string_table::string_table()
    : slots_(1024, 0) {}

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

void string_table::grow() {
    std::vector<std::uint32_t> bigger(slots_.size() * 2, 0);
    const std::size_t mask = bigger.size() - 1;
    for (std::uint32_t id = 0; id < strings_.size(); ++id) {
        std::size_t i = hashes_[id] & mask;
        while (bigger[i])
            i = (i + 1) & mask;
        bigger[i] = id + 1;
    }
    slots_.swap(bigger);
}

std::uint32_t string_table::intern(std::string_view s) {
    return intern(s, hash_bytes(s));
}

std::uint32_t string_table::intern(std::string_view s, std::uint64_t hash) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash & mask;
    while (const std::uint32_t slot = slots_[i]) {
        const std::uint32_t id = slot - 1;
        if (hashes_[id] == hash && strings_[id] == s)
            return id;
        i = (i + 1) & mask;
    }
    const auto id = static_cast<std::uint32_t>(strings_.size());
    strings_.push_back(store(s));
    hashes_.push_back(hash);
    slots_[i] = id + 1;
    if (strings_.size() * 2 > slots_.size())
        grow();
    return id;
}

std::size_t string_table::memory_bytes() const noexcept {
    return blocks_.size() * block_size_ + strings_.capacity() * sizeof(std::string_view) +
           hashes_.capacity() * 8 + slots_.capacity() * 4;
}

} // namespace collector
