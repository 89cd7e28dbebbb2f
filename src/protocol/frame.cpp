#include "protocol/frame.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace protocol {

std::string_view to_string(frame_flag f) noexcept {
    switch (f) {
    case frame_flag::text:
        return "text";
    case frame_flag::zstd:
        return "zstd";
    case frame_flag::command:
        return "command";
    case frame_flag::response:
        return "response";
    case frame_flag::metrics:
        return "metrics";
    case frame_flag::sequenced:
        return "sequenced";
    }
    return "unknown";
}

std::array<char, header_size> encode_header(frame_flag flag, std::uint32_t length) noexcept {
    return {static_cast<char>(length >> 24), static_cast<char>(length >> 16),
            static_cast<char>(length >> 8), static_cast<char>(length), static_cast<char>(flag)};
}

std::string encode_frame(frame_flag flag, std::string_view payload) {
    if (payload.size() > std::numeric_limits<std::uint32_t>::max())
        throw std::length_error("frame payload exceeds 4 GiB");
    const auto header = encode_header(flag, static_cast<std::uint32_t>(payload.size()));
    std::string out;
    out.reserve(header_size + payload.size());
    out.append(header.data(), header.size());
    out.append(payload);
    return out;
}

std::string encode_sequenced(std::string_view run, std::uint64_t seq, std::string_view zstd_chunk) {
    const auto nibble = [](char c) {
        return static_cast<unsigned>(c >= 'a' ? c - 'a' + 10 : c - '0') & 0xfu;
    };
    std::string payload(sequence_size, '\0');
    for (std::size_t i = 0; i < 16 && 2 * i + 1 < run.size(); ++i)
        payload[i] = static_cast<char>(nibble(run[2 * i]) << 4 | nibble(run[2 * i + 1]));
    for (std::size_t i = 0; i < 8; ++i)
        payload[16 + i] = static_cast<char>(seq >> (8 * (7 - i)));
    payload.append(zstd_chunk);
    return encode_frame(frame_flag::sequenced, payload);
}

std::optional<sequenced_chunk> split_sequenced(std::string_view payload) {
    if (payload.size() <= sequence_size)
        return std::nullopt;
    static constexpr char hex[] = "0123456789abcdef";
    sequenced_chunk out{std::string(32, '0'), 0, payload.substr(sequence_size)};
    for (std::size_t i = 0; i < 16; ++i) {
        const auto b = static_cast<unsigned char>(payload[i]);
        out.run[2 * i] = hex[b >> 4];
        out.run[2 * i + 1] = hex[b & 0xf];
    }
    for (std::size_t i = 0; i < 8; ++i)
        out.seq = (out.seq << 8) | static_cast<unsigned char>(payload[16 + i]);
    if (out.seq == 0)
        return std::nullopt;
    return out;
}

void frame_decoder::feed(std::string_view bytes) {
    while (!bytes.empty() && !error_) {
        if (!flag_) {
            const std::size_t take = std::min(header_size - header_fill_, bytes.size());
            std::copy_n(bytes.data(), take, header_.data() + header_fill_);
            header_fill_ += take;
            bytes.remove_prefix(take);
            if (header_fill_ < header_size)
                return;

            const std::size_t length = (std::size_t{header_[0]} << 24) |
                                       (std::size_t{header_[1]} << 16) |
                                       (std::size_t{header_[2]} << 8) | std::size_t{header_[3]};
            if (!is_known_flag(header_[4])) {
                error_ = errc::unknown_flag;
                return;
            }
            if (length > (first_done_ ? max_payload_ : first_max_payload_)) {
                error_ = errc::frame_too_large;
                return;
            }
            header_fill_ = 0;
            if (length == 0)
                continue; // keep-alive: nothing to deliver
            flag_ = static_cast<frame_flag>(header_[4]);
            payload_remaining_ = length;
        }

        const std::size_t take = std::min(payload_remaining_, bytes.size());
        payload_.append(bytes.data(), take);
        payload_remaining_ -= take;
        bytes.remove_prefix(take);
        if (payload_remaining_ == 0) {
            first_done_ = true;
            ready_.push_back(frame{*flag_, std::move(payload_)});
            payload_ = std::string();
            flag_.reset();
        }
    }
}

boost::system::result<std::optional<frame>> frame_decoder::next() {
    if (!ready_.empty()) {
        frame f = std::move(ready_.front());
        ready_.pop_front();
        return std::optional<frame>(std::move(f));
    }
    if (error_)
        return error_;
    return std::optional<frame>();
}

boost::system::error_code frame_decoder::finish() const noexcept {
    if (error_)
        return error_;
    if (header_fill_ != 0 || flag_)
        return errc::truncated_frame;
    return {};
}

} // namespace protocol
