// Cuts the endless `perf script` stream into chunks that end on sample boundaries.
//
// perf script prints a sample as a header line, then (with call graphs) one TAB-indented line
// per frame and a blank line. A frame line always starts with TAB, so a position right after
// '\n' whose next byte is not TAB is a boundary, for call-graph and flat output alike, and so is
// the end of a blank line (which closes a sample with a call chain). Complete
// samples go straight into the zstd compressor as they arrive; only the unfinished tail of the
// last sample is held as text, so a chunk never sits uncompressed in memory.
#pragma once

#include "agent/wait_folder.hpp"
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace agent {

using protocol::perf_stat_marker;

class chunker {
public:
    enum class encoding { zstd, text };

    explicit chunker(encoding enc = encoding::zstd, int zstd_level = protocol::default_zstd_level);

    // An off-CPU recording: its switches folded into waits on the way (wait_folder.hpp), the
    // sums held sent with each chunk.
    void fold_waits(const wait_folder::options& o) { folder_.emplace(o); }
    const wait_folder* folder() const noexcept { return folder_ ? &*folder_ : nullptr; }

    // Adds perf script output, in whatever pieces the pipe delivers.
    void append(std::string_view text);

    // Text bytes in the current chunk (complete samples only).
    std::size_t chunk_bytes() const noexcept { return chunk_bytes_; }
    // PERF_RECORD_LOST events seen since construction, and in the current chunk.
    std::uint64_t lost_total() const noexcept { return lost_total_; }
    std::uint64_t lost_in_chunk() const noexcept { return lost_chunk_; }

    // Ends the chunk and returns its payload (zstd frame or text), with `perf_stat` after the
    // marker when non-empty. An unfinished sample stays for the next chunk unless `final`.
    // Returns nullopt when the chunk holds no sample and no stat text.
    std::optional<std::string> cut(std::string_view perf_stat = {}, bool final = false);

    // Held text after the last boundary longer than this is flushed anyway, so input without
    // boundaries cannot grow memory without bound.
    static constexpr std::size_t max_tail = std::size_t{1} << 20;

private:
    void emit(std::string_view complete);
    void put(std::string_view text);

    encoding encoding_;
    protocol::zstd_compressor compressor_;
    std::string text_; // the chunk itself in text mode
    std::string tail_; // unfinished sample
    std::optional<wait_folder> folder_;
    std::string folded_;
    std::size_t chunk_bytes_ = 0;
    std::uint64_t lost_total_ = 0;
    std::uint64_t lost_chunk_ = 0;
};

} // namespace agent
