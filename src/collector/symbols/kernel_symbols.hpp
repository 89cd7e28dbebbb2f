// A device's kernel symbols, from its /proc/kallsyms (sent by an agent started with
// --allow-kallsyms): they name the kernel frames perf on the device could not, when the
// kernel hid its addresses from perf (kernel.kptr_restrict).
//
// The agent sends "ADDRESS NAME" lines (hex, text symbols only); anything else is skipped.
// Bounded: at most max_kernel_symbols lines are kept.
#pragma once

#include <cstdint>
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

private:
    std::vector<std::uint64_t> starts_; // sorted
    std::vector<std::string> names_;
};

} // namespace collector
