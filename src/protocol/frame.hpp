// Framing: every message is a 5-byte header followed by exactly LEN payload bytes.
//
//   0        4    5
//   +--------+----+------------------+
//   |  LEN   |FLAG|  payload (LEN)   |
//   +--------+----+------------------+
//   LEN: uint32, big-endian.  FLAG: frame_flag.
//
// The decoder is sans-IO: feed() it bytes in whatever pieces the socket delivers, then call
// next() until it says it needs more. Lengths are checked against the receiver's limit when
// the header is complete, before any payload byte is stored, and payload storage grows only
// with bytes that actually arrived, so a peer that declares 128 MiB and sends nothing costs
// nothing.
#pragma once

#include "protocol/error.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

namespace protocol {

enum class frame_flag : std::uint8_t {
    text = 0,     // agent -> collector: perf script text [+ "\n### PERF_STAT ###\n" + stat]
    zstd = 1,     // agent -> collector: the same, as one zstd frame
    command = 2,  // collector -> agent: {"id","cmd","args"}
    response = 3, // agent -> collector: command response, and the hello
    metrics = 4,  // agent -> collector: one health-metrics object
    // agent -> collector: a chunk of a run that outlives its link: the run's id (16 bytes), the
    // chunk's number in the run (8 bytes, big-endian, from 1), then flag 1's payload. Sent only
    // once the collector asked for it (the `sequence` command, docs/protocol.md "Runs").
    sequenced = 5,
};

// A data chunk (flag 0 or 1) is perf script text, then this line and the perf stat report of
// the same span.
inline constexpr std::string_view perf_stat_marker = "\n### PERF_STAT ###\n";
// A metrics record (protocol::serialize's JSON, one line) inside perf script text, as a comment
// perf's own readers skip: a recording written by an agent (--output) keeps what the live link
// would have sent beside it — its binaries' build-ids — so an import names frames as the live
// session would.
inline constexpr std::string_view metrics_note = "# perfwire-metrics ";

inline constexpr std::size_t header_size = 5;

// Receiver limits (SPEC §1).
inline constexpr std::size_t collector_max_frame = std::size_t{128} << 20;
inline constexpr std::size_t agent_max_frame = std::size_t{1} << 20;
inline constexpr std::size_t max_decompressed = std::size_t{1} << 30;
// Before the hello, a frame may be no larger than a hello can be: checked on the header.
inline constexpr std::size_t hello_max_frame = std::size_t{64} << 10;
// A data chunk's text: the agent cuts chunks at 16 MiB, so a payload that expands past this
// is a bomb, stopped as it expands.
inline constexpr std::size_t max_chunk_text = std::size_t{64} << 20;
// A health-metrics object; larger ones are refused, never forwarded to browsers.
inline constexpr std::size_t max_metrics_frame = std::size_t{256} << 10;
inline constexpr std::size_t max_hello = std::size_t{64} << 10;
// One string in a hello (a hostname, a kernel release, a version, an enrollment token): each
// but the token is shown with its target in every browser, so a hello is refused when one is
// longer.
inline constexpr std::size_t max_hello_field = 256;

constexpr bool is_known_flag(std::uint8_t f) noexcept {
    return f <= 5;
}
std::string_view to_string(frame_flag f) noexcept;

struct frame {
    frame_flag flag;
    std::string payload;
};

// A sequenced chunk (flag 5): its run (32 hex digits on the wire as 16 bytes), its number, then
// the zstd chunk.
inline constexpr std::size_t sequence_size = 16 + 8;
// `run`: 32 lowercase hex digits (messages.hpp, valid_run_id).
std::string encode_sequenced(std::string_view run, std::uint64_t seq, std::string_view zstd_chunk);
struct sequenced_chunk {
    std::string run; // 32 lowercase hex digits
    std::uint64_t seq;
    std::string_view chunk;
};
// nullopt when the payload is too short to hold the header and a chunk, or numbers it 0.
std::optional<sequenced_chunk> split_sequenced(std::string_view payload);

std::array<char, header_size> encode_header(frame_flag flag, std::uint32_t length) noexcept;

// Header + payload in one buffer. Throws std::length_error if payload exceeds 4 GiB - 1.
std::string encode_frame(frame_flag flag, std::string_view payload);

class frame_decoder {
public:
    // `first_max_payload`: the limit of the first frame alone (the collector's hello limit, so
    // a peer that has not introduced itself cannot make it hold more), checked on its header.
    explicit frame_decoder(std::size_t max_payload,
                           std::size_t first_max_payload = SIZE_MAX) noexcept
        : max_payload_(max_payload)
        , first_max_payload_(std::min(max_payload, first_max_payload)) {}

    // Consumes all of `bytes`. After an error, further input is ignored.
    void feed(std::string_view bytes);

    // The next complete frame; std::nullopt when more bytes are needed; or the error that
    // stopped decoding (after every frame that preceded it has been returned). Zero-length
    // frames are skipped.
    boost::system::result<std::optional<frame>> next();

    // At end of stream: truncated_frame when a partial frame is pending, else success.
    boost::system::error_code finish() const noexcept;

    // Bytes held for the frame in progress (header and payload so far).
    std::size_t pending_bytes() const noexcept { return header_fill_ + payload_.size(); }

private:
    std::size_t max_payload_, first_max_payload_;
    bool first_done_ = false;
    std::array<unsigned char, header_size> header_{};
    std::size_t header_fill_ = 0;
    std::optional<frame_flag> flag_; // set while reading a payload
    std::size_t payload_remaining_ = 0;
    std::string payload_;
    std::deque<frame> ready_;
    boost::system::error_code error_;
};

} // namespace protocol
