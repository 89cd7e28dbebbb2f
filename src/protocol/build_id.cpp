#include "protocol/build_id.hpp"

#include <cstdint>
#include <fstream>

namespace protocol {
namespace {

constexpr std::uint32_t pt_note = 4;
constexpr std::uint32_t nt_gnu_build_id = 3;
constexpr std::size_t max_note_bytes = 64 * 1024;
constexpr std::size_t max_program_headers = 512;

// Reads fields of the file's byte order from an image or a file; every read is bounds-checked.
class elf_reader {
public:
    virtual ~elf_reader() = default;
    // `n` bytes at `offset`, or an empty string when they are not all there.
    virtual std::string bytes(std::uint64_t offset, std::size_t n) = 0;
};

class memory_reader final : public elf_reader {
public:
    explicit memory_reader(std::string_view image)
        : image_(image) {}
    std::string bytes(std::uint64_t offset, std::size_t n) override {
        if (offset > image_.size() || n > image_.size() - offset)
            return {};
        return std::string(image_.substr(offset, n));
    }

private:
    std::string_view image_;
};

class file_reader final : public elf_reader {
public:
    explicit file_reader(const std::string& path)
        : in_(path, std::ios::binary) {}
    std::string bytes(std::uint64_t offset, std::size_t n) override {
        std::string out(n, '\0');
        if (!in_.seekg(static_cast<std::streamoff>(offset)) ||
            !in_.read(out.data(), static_cast<std::streamsize>(n)))
            out.clear();
        in_.clear();
        return out;
    }
    explicit operator bool() const { return static_cast<bool>(in_); }

private:
    std::ifstream in_;
};

std::uint64_t field(std::string_view s, std::size_t at, std::size_t size, bool big_endian) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < size; ++i) {
        const auto b = static_cast<std::uint8_t>(s[at + (big_endian ? i : size - 1 - i)]);
        v = (v << 8) | b;
    }
    return v;
}

std::string hex(std::string_view bytes) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (const char c : bytes) {
        const auto b = static_cast<std::uint8_t>(c);
        out.push_back(digits[b >> 4]);
        out.push_back(digits[b & 15]);
    }
    return out;
}

// The build-id in one note segment's bytes, if any.
std::optional<std::string> find_in_notes(std::string_view notes, bool be) {
    std::size_t at = 0;
    const auto align4 = [](std::uint64_t n) { return (n + 3) & ~std::uint64_t{3}; };
    while (notes.size() - at >= 12) {
        const auto namesz = field(notes, at, 4, be);
        const auto descsz = field(notes, at + 4, 4, be);
        const auto type = field(notes, at + 8, 4, be);
        const std::uint64_t name_at = at + 12;
        const std::uint64_t desc_at = name_at + align4(namesz);
        const std::uint64_t next = desc_at + align4(descsz);
        if (desc_at + descsz > notes.size())
            return std::nullopt;
        if (type == nt_gnu_build_id && namesz == 4 &&
            notes.substr(name_at, 4) == std::string_view("GNU\0", 4) && descsz > 0 && descsz <= 64)
            return hex(notes.substr(desc_at, descsz));
        if (next > notes.size())
            return std::nullopt;
        at = next;
    }
    return std::nullopt;
}

std::optional<std::string> build_id(elf_reader& r) {
    const std::string ident = r.bytes(0, 64);
    if (ident.size() < 52 || ident.compare(0, 4,
                                           "\x7f"
                                           "ELF") != 0)
        return std::nullopt;
    const bool wide = ident[4] == 2; // ELFCLASS64
    const bool be = ident[5] == 2;   // ELFDATA2MSB
    if ((ident[4] != 1 && ident[4] != 2) || (ident[5] != 1 && ident[5] != 2))
        return std::nullopt;
    const std::uint64_t phoff = wide ? field(ident, 32, 8, be) : field(ident, 28, 4, be);
    const std::size_t phentsize = field(ident, wide ? 54 : 42, 2, be);
    const std::size_t phnum = field(ident, wide ? 56 : 44, 2, be);
    if (phentsize < (wide ? 56u : 32u) || phnum == 0 || phnum > max_program_headers)
        return std::nullopt;
    const std::string table = r.bytes(phoff, phentsize * phnum);
    if (table.empty())
        return std::nullopt;
    for (std::size_t i = 0; i < phnum; ++i) {
        const std::size_t h = i * phentsize;
        if (field(table, h, 4, be) != pt_note)
            continue;
        const std::uint64_t offset = wide ? field(table, h + 8, 8, be) : field(table, h + 4, 4, be);
        const std::uint64_t size = wide ? field(table, h + 32, 8, be) : field(table, h + 16, 4, be);
        if (size == 0 || size > max_note_bytes)
            continue;
        if (auto id = find_in_notes(r.bytes(offset, size), be))
            return id;
    }
    return std::nullopt;
}

} // namespace

std::optional<std::string> parse_build_id(std::string_view image) {
    memory_reader r(image);
    return build_id(r);
}

std::optional<std::string> read_build_id(const std::string& path) {
    file_reader r(path);
    if (!r)
        return std::nullopt;
    return build_id(r);
}

} // namespace protocol
