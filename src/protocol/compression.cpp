#include "protocol/compression.hpp"

#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

namespace protocol {
namespace {

constexpr unsigned zstd_magic = 0xFD2FB528U; // little-endian on the wire

ZSTD_CCtx* new_cctx(int level) {
    ZSTD_CCtx* ctx = ZSTD_createCCtx();
    if (!ctx)
        throw std::bad_alloc();
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(ctx, ZSTD_c_checksumFlag, 1);
    return ctx;
}

// Runs the compressor with `mode` until it has consumed `in` (continue) or flushed (end).
void pump(ZSTD_CCtx* ctx, std::string& out, std::string_view text, ZSTD_EndDirective mode) {
    ZSTD_inBuffer in{text.data(), text.size(), 0};
    const std::size_t step = ZSTD_CStreamOutSize();
    for (;;) {
        const std::size_t used = out.size();
        out.resize(used + step);
        ZSTD_outBuffer ob{out.data(), out.size(), used};
        const std::size_t left = ZSTD_compressStream2(ctx, &ob, &in, mode);
        out.resize(ob.pos);
        if (ZSTD_isError(left))
            throw std::runtime_error(std::string("zstd: ") + ZSTD_getErrorName(left));
        const bool done = mode == ZSTD_e_end ? left == 0 : in.pos == in.size;
        if (done)
            return;
    }
}

} // namespace

std::string compress(std::string_view text, int level) {
    std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> ctx(new_cctx(level), &ZSTD_freeCCtx);
    ZSTD_CCtx_setPledgedSrcSize(ctx.get(), text.size());
    std::string out;
    out.reserve(ZSTD_compressBound(text.size()));
    pump(ctx.get(), out, text, ZSTD_e_end);
    return out;
}

boost::system::result<std::string> decompress(std::string_view data, std::size_t cap) {
    // Classify the start first: a short prefix of a real frame is truncated, anything else
    // that is not a zstd frame is corrupt.
    unsigned char magic[4] = {};
    std::memcpy(magic, data.data(), std::min<std::size_t>(4, data.size()));
    const unsigned found = magic[0] | magic[1] << 8 | magic[2] << 16 | unsigned{magic[3]} << 24;
    if (data.size() < 4) {
        const unsigned mask = data.empty() ? 0 : 0xFFFFFFFFU >> (8 * (4 - data.size()));
        return (found & mask) == (zstd_magic & mask) ? errc::zstd_truncated : errc::zstd_corrupt;
    }
    if (found != zstd_magic)
        return errc::zstd_corrupt;

    const unsigned long long declared = ZSTD_getFrameContentSize(data.data(), data.size());
    if (declared == ZSTD_CONTENTSIZE_ERROR)
        return errc::zstd_truncated; // magic is right, so the header is incomplete
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared > cap)
        return errc::zstd_too_large;

    std::unique_ptr<ZSTD_DCtx, decltype(&ZSTD_freeDCtx)> ctx(ZSTD_createDCtx(), &ZSTD_freeDCtx);
    if (!ctx)
        throw std::bad_alloc();

    std::string out;
    // Trust a declared size for the first allocation only up to a modest bound.
    const std::size_t step = ZSTD_DStreamOutSize();
    const std::size_t first =
        declared == ZSTD_CONTENTSIZE_UNKNOWN
            ? step
            : static_cast<std::size_t>(std::min<unsigned long long>(declared + 1, 64U << 20));
    out.resize(std::min(first, cap + 1));

    ZSTD_inBuffer in{data.data(), data.size(), 0};
    std::size_t produced = 0;
    std::size_t last = 1;
    for (;;) {
        if (produced == out.size()) {
            if (out.size() > cap)
                return errc::zstd_too_large;
            out.resize(std::min(std::max(out.size() * 2, out.size() + step), cap + 1));
        }
        const std::size_t in_before = in.pos;
        const std::size_t out_before = produced;
        ZSTD_outBuffer ob{out.data(), out.size(), produced};
        last = ZSTD_decompressStream(ctx.get(), &ob, &in);
        if (ZSTD_isError(last))
            return errc::zstd_corrupt;
        produced = ob.pos;
        if (produced > cap)
            return errc::zstd_too_large;
        if (last == 0 && in.pos == in.size)
            break; // every frame complete and flushed
        if (in.pos == in_before && produced == out_before && produced < out.size())
            break; // no progress with room to spare: the input stops early
    }
    if (last != 0)
        return errc::zstd_truncated;
    out.resize(produced);
    return out;
}

void zstd_compressor::context_deleter::operator()(void* ctx) const noexcept {
    ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(ctx));
}

zstd_compressor::zstd_compressor(int level)
    : ctx_(new_cctx(level)) {}
zstd_compressor::zstd_compressor(zstd_compressor&&) noexcept = default;
zstd_compressor& zstd_compressor::operator=(zstd_compressor&&) noexcept = default;
zstd_compressor::~zstd_compressor() = default;

void zstd_compressor::write(std::string_view text) {
    if (text.empty())
        return;
    pump(static_cast<ZSTD_CCtx*>(ctx_.get()), out_, text, ZSTD_e_continue);
    input_bytes_ += text.size();
}

std::string zstd_compressor::finish() {
    pump(static_cast<ZSTD_CCtx*>(ctx_.get()), out_, {}, ZSTD_e_end);
    input_bytes_ = 0;
    // Its room for zstd's next output block (128 KiB) goes: a chunk kept a while (a flight
    // recorder's window, an outbox while the link is down) costs its bytes, not the block's.
    auto out = std::exchange(out_, std::string());
    if (out.capacity() > out.size() + out.size() / 4 + 64)
        out.shrink_to_fit();
    return out;
}

} // namespace protocol
