// Open addressing from keys to dense 32-bit ids. The index stores only `id + 1` per slot (0 is
// empty); the caller keeps the keys in its own columns and says how to compare and rehash
// them. Linear probing, at most half full. The string table, the frame table, the stack trie
// and the source sites all index their rows this way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace collector {

class dense_index {
public:
    explicit dense_index(std::size_t initial_slots = 1024)
        : slots_(initial_slots, 0) {}

    struct probe {
        std::uint32_t id; // the row found, or `none`
        std::size_t slot; // where to insert when not found
    };
    static constexpr std::uint32_t none = 0xFFFFFFFFU;

    // `same(id)`: does row `id` hold the key being looked up (whose hash is `hash`)?
    template <class Same>
    probe find(std::uint64_t hash, Same&& same) const {
        const std::size_t mask = slots_.size() - 1;
        std::size_t i = hash & mask;
        while (const std::uint32_t slot = slots_[i]) {
            if (same(slot - 1))
                return {slot - 1, i};
            i = (i + 1) & mask;
        }
        return {none, i};
    }

    // Records `id` at the slot find() returned. `hash_of(id)` rehashes rows when growing.
    template <class HashOf>
    void insert(std::size_t slot, std::uint32_t id, HashOf&& hash_of) {
        slots_[slot] = id + 1;
        if (++count_ * 2 > slots_.size())
            grow(hash_of);
    }

    std::size_t memory_bytes() const noexcept { return slots_.capacity() * sizeof(std::uint32_t); }

private:
    template <class HashOf>
    void grow(HashOf& hash_of) {
        std::vector<std::uint32_t> bigger(slots_.size() * 2, 0);
        const std::size_t mask = bigger.size() - 1;
        for (const std::uint32_t slot : slots_) {
            if (!slot)
                continue;
            std::size_t i = hash_of(slot - 1) & mask;
            while (bigger[i])
                i = (i + 1) & mask;
            bigger[i] = slot;
        }
        slots_.swap(bigger);
    }

    std::vector<std::uint32_t> slots_;
    std::size_t count_ = 0;
};

} // namespace collector
