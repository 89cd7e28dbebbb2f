// A column stored in fixed blocks of 4 Ki entries: no reallocation copies as a
// session grows, and unused capacity is at most one block (a vector's doubling would leave
// up to half of it empty). Whole blocks at the front can be given back (release_before): the
// entries keep their indices, and those before the first block kept must not be read.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace collector {

template <class T>
class column {
public:
    static constexpr std::size_t block_bits = 12; // small: hundreds of sessions each hold one
    static constexpr std::size_t block_size = std::size_t{1} << block_bits;

    void push_back(T v) {
        if ((size_ & (block_size - 1)) == 0)
            blocks_.push_back(std::make_unique<T[]>(block_size));
        blocks_.back()[size_ & (block_size - 1)] = v;
        ++size_;
    }
    T operator[](std::size_t i) const noexcept {
        return blocks_[i >> block_bits][i & (block_size - 1)];
    }
    void set(std::size_t i, T v) noexcept { blocks_[i >> block_bits][i & (block_size - 1)] = v; }
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    std::size_t memory_bytes() const noexcept {
        return (blocks_.size() - released_) * block_size * sizeof(T) +
               blocks_.capacity() * sizeof(void*);
    }
    // Frees the blocks wholly before entry `n`.
    void release_before(std::size_t n) {
        for (; released_ < (n >> block_bits) && released_ < blocks_.size(); ++released_)
            blocks_[released_].reset();
    }

private:
    std::vector<std::unique_ptr<T[]>> blocks_;
    std::size_t size_ = 0;
    std::size_t released_ = 0; // blocks freed at the front
};

} // namespace collector
