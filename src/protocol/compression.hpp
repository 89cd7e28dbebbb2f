// zstd for flag-1 frames. The agent streams perf text through a zstd_compressor as perf prints
// it, so a chunk never sits uncompressed in its memory; the collector decompresses with a hard
// cap on output, so a small frame cannot expand into an unbounded allocation.
#pragma once

#include "protocol/frame.hpp"

#include <boost/system/result.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace protocol {

inline constexpr int default_zstd_level = 1;

// One zstd frame, with its content size and a checksum.
std::string compress(std::string_view text, int level = default_zstd_level);

// Decompresses one zstd frame (or several concatenated). Errors: zstd_too_large when the
// declared content size or the actual output exceeds `cap`; zstd_truncated when the input
// stops early; zstd_corrupt otherwise.
boost::system::result<std::string> decompress(std::string_view data,
                                              std::size_t cap = max_decompressed);

class zstd_compressor {
public:
    explicit zstd_compressor(int level = default_zstd_level);
    zstd_compressor(zstd_compressor&&) noexcept;
    zstd_compressor& operator=(zstd_compressor&&) noexcept;
    ~zstd_compressor();

    // Adds text to the current frame; compressed bytes accumulate internally.
    void write(std::string_view text);

    // Uncompressed bytes written to the current frame.
    std::size_t input_bytes() const noexcept { return input_bytes_; }
    // Compressed bytes produced so far for the current frame (before finish()).
    std::size_t output_bytes() const noexcept { return out_.size(); }

    // Ends the current frame and returns it; the next write() starts a new frame.
    std::string finish();

private:
    struct context_deleter {
        void operator()(void* ctx) const noexcept;
    };
    std::unique_ptr<void, context_deleter> ctx_;
    std::string out_;
    std::size_t input_bytes_ = 0;
};

} // namespace protocol
