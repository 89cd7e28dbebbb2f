// Fuzzes what a peer controls: framing, zstd payloads, every JSON message, ELF notes.
// Oracles beyond "no crash": decoding in pieces must equal decoding whole; whatever parses
// must serialize and parse back to the same text; whatever decompresses must round-trip.
#include "protocol/build_id.hpp"
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

using namespace protocol;

namespace {

void check(bool ok) {
    if (!ok)
        std::abort();
}

struct outcome {
    std::vector<frame> frames;
    boost::system::error_code error;
};

outcome decode(std::string_view bytes, std::size_t piece) {
    frame_decoder d(agent_max_frame);
    outcome out;
    for (std::size_t pos = 0; pos < bytes.size(); pos += piece) {
        d.feed(bytes.substr(pos, piece));
        for (;;) {
            auto r = d.next();
            if (!r) {
                out.error = r.error();
                return out;
            }
            if (!*r)
                break;
            out.frames.push_back(std::move(**r));
        }
    }
    out.error = d.finish();
    return out;
}

template <class Parse>
void round_trip(std::string_view payload, Parse parse) {
    auto first = parse(payload);
    if (!first)
        return;
    const std::string text = serialize(*first);
    auto second = parse(text);
    check(second.has_value());
    check(serialize(*second) == text);
}

void exercise(const frame& f) {
    switch (f.flag) {
    case frame_flag::text:
        break;
    case frame_flag::zstd:
        if (auto text = decompress(f.payload, 1u << 20)) {
            auto again = decompress(compress(*text), text->size());
            check(again && *again == *text);
        }
        break;
    case frame_flag::command:
        round_trip(f.payload, parse_command_request);
        break;
    case frame_flag::response:
        round_trip(f.payload, parse_command_response);
        round_trip(f.payload, parse_hello);
        (void)parse_agent_reply(f.payload);
        break;
    case frame_flag::metrics:
        round_trip(f.payload, parse_metrics);
        break;
    case frame_flag::sequenced:
        // Whatever splits encodes back to the same bytes.
        if (auto c = split_sequenced(f.payload)) {
            check(valid_run_id(c->run) && c->seq > 0);
            const auto again = encode_sequenced(c->run, c->seq, c->chunk);
            check(again.substr(header_size) == f.payload);
        }
        break;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0)
        return 0;
    const std::size_t piece = 1 + data[0] % 13;
    const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);

    const outcome whole = decode(bytes, bytes.size() + 1);
    const outcome split = decode(bytes, piece);
    check(whole.error == split.error);
    check(whole.frames.size() == split.frames.size());
    for (std::size_t i = 0; i < whole.frames.size(); ++i) {
        check(whole.frames[i].flag == split.frames[i].flag);
        check(whole.frames[i].payload == split.frames[i].payload);
        exercise(whole.frames[i]);
    }
    // The payloads on their own, as if each had arrived in a frame of every type.
    for (std::uint8_t flag = 0; flag <= 5; ++flag)
        exercise(frame{static_cast<frame_flag>(flag), std::string(bytes)});
    // And as an ELF image: a build-id, when found, is lowercase hex of whole bytes.
    if (const auto id = parse_build_id(bytes))
        check(!id->empty() && id->size() % 2 == 0 &&
              id->find_first_not_of("0123456789abcdef") == std::string::npos);
    return 0;
}
