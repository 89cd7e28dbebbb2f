#include "agent/chunker.hpp"

#include <charconv>

namespace agent {
namespace {

// Index just past the last boundary in `s`, or npos. The byte after '\n' must be present to
// know whether it starts a frame line.
std::size_t last_boundary(std::string_view s) {
    if (s.size() < 2)
        return std::string_view::npos;
    if (s.ends_with("\n\n"))
        return s.size(); // a blank line closes a sample with a call chain
    for (std::size_t i = s.size() - 1; i-- > 0;) {
        if (s[i] == '\n' && s[i + 1] != '\t')
            return i + 1;
    }
    return std::string_view::npos;
}

std::uint64_t count_lost(std::string_view text) {
    static constexpr std::string_view tag = "PERF_RECORD_LOST lost ";
    std::uint64_t lost = 0;
    for (std::size_t pos = text.find(tag); pos != std::string_view::npos;
         pos = text.find(tag, pos + tag.size())) {
        std::uint64_t n = 0;
        const char* first = text.data() + pos + tag.size();
        std::from_chars(first, text.data() + text.size(), n);
        lost += n;
    }
    return lost;
}

} // namespace

chunker::chunker(encoding enc, int zstd_level)
    : encoding_(enc)
    , compressor_(zstd_level) {}

void chunker::emit(std::string_view complete) {
    if (complete.empty())
        return;
    const auto lost = count_lost(complete);
    lost_total_ += lost;
    lost_chunk_ += lost;
    if (!folder_) {
        put(complete);
        return;
    }
    folded_.clear();
    folder_->fold(complete, folded_);
    put(folded_);
}

void chunker::put(std::string_view text) {
    if (text.empty())
        return;
    if (encoding_ == encoding::zstd)
        compressor_.write(text);
    else
        text_.append(text);
    chunk_bytes_ += text.size();
}

void chunker::append(std::string_view text) {
    if (tail_.empty()) {
        // Fast path: no copy of the complete part.
        const std::size_t b = last_boundary(text);
        if (b != std::string_view::npos) {
            emit(text.substr(0, b));
            text.remove_prefix(b);
        }
        tail_.assign(text);
    } else {
        tail_.append(text);
        const std::size_t b = last_boundary(tail_);
        if (b != std::string_view::npos) {
            emit(std::string_view(tail_).substr(0, b));
            tail_.erase(0, b);
        }
    }
    if (tail_.size() > max_tail) {
        emit(tail_);
        tail_.clear();
    }
}

std::optional<std::string> chunker::cut(std::string_view perf_stat, bool final) {
    if (final) {
        emit(tail_);
        tail_.clear();
    }
    if (folder_) { // the waits summed so far go with the chunk
        folded_.clear();
        folder_->flush(folded_, final);
        put(folded_);
    }
    if (chunk_bytes_ == 0 && perf_stat.empty())
        return std::nullopt;
    if (!perf_stat.empty()) {
        const std::string stat = std::string(perf_stat_marker) + std::string(perf_stat);
        if (encoding_ == encoding::zstd)
            compressor_.write(stat);
        else
            text_.append(stat);
    }
    chunk_bytes_ = 0;
    lost_chunk_ = 0;
    if (encoding_ == encoding::zstd)
        return compressor_.finish();
    return std::exchange(text_, std::string());
}

} // namespace agent
