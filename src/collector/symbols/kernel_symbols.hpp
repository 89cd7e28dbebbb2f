// A device's kernel symbols, from its /proc/kallsyms (sent by an agent started with
// --allow-kallsyms): they name the kernel frames perf on the device could not, when the
// kernel hid its addresses from perf (kernel.kptr_restrict).
//
// The agent sends "ADDRESS NAME" lines (hex, text symbols only); anything else is skipped.
// Bounded: at most max_kernel_symbols lines are kept, the names in one block (about 12 bytes
// a symbol besides its name). Devices that run one kernel send one table: kernel_tables keeps
// each distinct table once, for as long as a session holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace collector {

inline constexpr std::size_t max_kernel_symbols = std::size_t{1} << 21;
inline constexpr std::size_t max_kernel_symbols_text = std::size_t{96} << 20;

class kernel_symbols {
public:
    static kernel_symbols parse(std::string_view text);

    std::size_t size() const noexcept { return starts_.size(); }
    // The symbol an absolute kernel address falls in: the last one starting at or below it,
    // if a later one starts above it (past the last symbol nothing is known).
    struct symbol {
        std::string_view name;
        std::uint64_t start = 0;
    };
    std::optional<symbol> at(std::uint64_t address) const;

    // "ADDRESS NAME" lines again, as a session's folder keeps them.
    std::string text() const;
    std::size_t memory_bytes() const noexcept {
        return starts_.capacity() * 8 + name_end_.capacity() * 4 + names_.capacity();
    }

private:
    std::string_view name(std::size_t i) const noexcept {
        const std::uint32_t from = i ? name_end_[i - 1] : 0;
        return std::string_view(names_).substr(from, name_end_[i] - from);
    }
    std::vector<std::uint64_t> starts_; // sorted
    std::vector<std::uint32_t> name_end_;
    std::string names_;
};

// The distinct kernel tables held now, by what they hold (the SHA-256 of the text an agent
// sent, and of the table's text() as a session's folder keeps it, so a session reloaded from
// disk shares the table its agent's text made): a second session from the same kernel shares
// the first one's table. Together they hold at most `limit` bytes (a share of the memory
// budget): past it a new table is not made. Any thread.
class kernel_tables {
public:
    // The table of `text`, or null when a new one would take the tables past their limit.
    std::shared_ptr<const kernel_symbols> get(std::string_view text);
    void set_limit(std::size_t bytes);
    // Why a session has no kernel table when get() made none.
    static constexpr const char* full = "the kernel symbol tables held already take their "
                                        "share of the collector's memory budget";
    std::size_t limit() const;
    // Bytes held by the tables some session still holds.
    std::size_t memory_bytes() const;

private:
    std::size_t held_locked() const;

    mutable std::mutex mutex_;
    std::map<std::string, std::weak_ptr<const kernel_symbols>> tables_;
    std::size_t limit_ = SIZE_MAX;
};

} // namespace collector
