// An append-only column stored in fixed blocks of 64 Ki entries: no reallocation copies as a
// session grows, and unused capacity is at most one block (a vector's doubling would leave
// up to half of it empty).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace collector {

template <class T>
class column {
public:
    static constexpr std::size_t block_bits = 16;
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
    std::size_t size() const noexcept { return size_; }
    bool empty() const noexcept { return size_ == 0; }
    std::size_t memory_bytes() const noexcept {
        return blocks_.size() * block_size * sizeof(T) + blocks_.capacity() * sizeof(void*);
    }

private:
    std::vector<std::unique_ptr<T[]>> blocks_;
    std::size_t size_ = 0;
};

} // namespace collector
