#include "protocol/build_id.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace protocol {
namespace {

constexpr std::uint32_t pt_load = 1;
constexpr std::uint32_t pt_note = 4;
constexpr std::uint32_t sht_nobits = 8;
constexpr std::size_t max_sections = 16384;
constexpr std::size_t max_section_names = 1 << 20;
constexpr std::size_t max_debuglink = 4096;
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

// Opened without blocking and read only when it is a regular file: a path swapped for a FIFO
// or a device after it was checked never hangs or streams.
class file_reader final : public elf_reader {
public:
    explicit file_reader(const std::string& path)
        : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)) {
        struct stat st {};
        if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode))
            size_ = static_cast<std::uint64_t>(st.st_size);
        else
            close_fd();
    }
    ~file_reader() override { close_fd(); }
    file_reader(const file_reader&) = delete;
    file_reader& operator=(const file_reader&) = delete;

    std::string bytes(std::uint64_t offset, std::size_t n) override {
        if (fd_ < 0 || offset > size_ || n > size_ - offset)
            return {}; // never allocated: the file is not that long
        std::string out(n, '\0');
        std::size_t got = 0;
        while (got < n) {
            const ssize_t r =
                ::pread(fd_, out.data() + got, n - got, static_cast<off_t>(offset + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                return {};
            got += static_cast<std::size_t>(r);
        }
        return out;
    }
    explicit operator bool() const { return fd_ >= 0; }

private:
    void close_fd() {
        if (fd_ >= 0)
            ::close(fd_);
        fd_ = -1;
    }
    int fd_ = -1;
    std::uint64_t size_ = 0;
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

struct header {
    bool wide = false, be = false;
    std::uint64_t phoff = 0, shoff = 0;
    std::size_t phentsize = 0, phnum = 0, shentsize = 0, shnum = 0, shstrndx = 0;
    std::uint64_t machine = 0;
};

std::optional<header> read_header(elf_reader& r) {
    const std::string ident = r.bytes(0, 64);
    if (ident.size() < 52 || ident.compare(0, 4,
                                           "\x7f"
                                           "ELF") != 0)
        return std::nullopt;
    header h;
    h.wide = ident[4] == 2; // ELFCLASS64
    h.be = ident[5] == 2;   // ELFDATA2MSB
    if ((ident[4] != 1 && ident[4] != 2) || (ident[5] != 1 && ident[5] != 2))
        return std::nullopt;
    const bool w = h.wide, be = h.be;
    h.phoff = w ? field(ident, 32, 8, be) : field(ident, 28, 4, be);
    h.shoff = w ? field(ident, 40, 8, be) : field(ident, 32, 4, be);
    h.phentsize = field(ident, w ? 54 : 42, 2, be);
    h.phnum = field(ident, w ? 56 : 44, 2, be);
    h.shentsize = field(ident, w ? 58 : 46, 2, be);
    h.shnum = field(ident, w ? 60 : 48, 2, be);
    h.shstrndx = field(ident, w ? 62 : 50, 2, be);
    h.machine = field(ident, 18, 2, be);
    return h;
}

void read_segments(elf_reader& r, const header& h, elf_facts& out) {
    const bool w = h.wide, be = h.be;
    if (h.phentsize != (w ? 56u : 32u) || h.phnum == 0 || h.phnum > max_program_headers)
        return;
    const std::string table = r.bytes(h.phoff, h.phentsize * h.phnum);
    if (table.empty())
        return;
    for (std::size_t i = 0; i < h.phnum; ++i) {
        const std::size_t at = i * h.phentsize;
        const auto type = field(table, at, 4, be);
        const std::uint64_t offset = w ? field(table, at + 8, 8, be) : field(table, at + 4, 4, be);
        const std::uint64_t vaddr = w ? field(table, at + 16, 8, be) : field(table, at + 8, 4, be);
        const std::uint64_t size = w ? field(table, at + 32, 8, be) : field(table, at + 16, 4, be);
        const std::uint64_t memsz = w ? field(table, at + 40, 8, be) : field(table, at + 20, 4, be);
        const std::uint64_t align = w ? field(table, at + 48, 8, be) : field(table, at + 28, 4, be);
        if (type == pt_load)
            out.loads.push_back({offset, vaddr, size, memsz, align});
        else if (type == pt_note && !out.build_id && size > 0 && size <= max_note_bytes)
            out.build_id = find_in_notes(r.bytes(offset, size), be);
    }
}

void read_sections(elf_reader& r, const header& h, elf_facts& out) {
    const bool w = h.wide, be = h.be;
    if (h.shentsize != (w ? 64u : 40u) || h.shnum == 0 || h.shnum > max_sections ||
        h.shstrndx >= h.shnum)
        return;
    const std::string table = r.bytes(h.shoff, h.shentsize * h.shnum);
    if (table.empty())
        return;
    struct section {
        std::uint64_t name, type, offset, size;
    };
    const auto at = [&](std::size_t i) {
        const std::size_t a = i * h.shentsize;
        return section{field(table, a, 4, be), field(table, a + 4, 4, be),
                       w ? field(table, a + 24, 8, be) : field(table, a + 16, 4, be),
                       w ? field(table, a + 32, 8, be) : field(table, a + 20, 4, be)};
    };
    const section names = at(h.shstrndx);
    if (names.size == 0 || names.size > max_section_names)
        return;
    const std::string strings = r.bytes(names.offset, names.size);
    if (strings.empty())
        return;
    const auto name_of = [&](std::uint64_t n) -> std::string_view {
        if (n >= strings.size())
            return {};
        const auto end = strings.find('\0', n);
        return std::string_view(strings).substr(n, end == std::string::npos ? end : end - n);
    };
    for (std::size_t i = 0; i < h.shnum; ++i) {
        const section s = at(i);
        const auto name = name_of(s.name);
        const bool contents = s.type != sht_nobits && s.size > 0;
        if (name == ".text")
            out.text_in_file = s.type != sht_nobits;
        else if (name == ".symtab")
            out.symtab = out.symtab || contents;
        else if (name == ".gnu_debuglink" && contents) {
            const std::string link =
                r.bytes(s.offset, std::min<std::uint64_t>(s.size, max_debuglink));
            out.debuglink = link.substr(0, link.find('\0'));
        }
    }
}

std::optional<elf_facts> facts(elf_reader& r) {
    const auto h = read_header(r);
    if (!h)
        return std::nullopt;
    elf_facts out;
    out.machine = static_cast<std::uint16_t>(h->machine);
    read_segments(r, *h, out);
    read_sections(r, *h, out);
    return out;
}

std::optional<std::string> build_id(elf_reader& r) {
    const auto h = read_header(r);
    if (!h)
        return std::nullopt;
    elf_facts out;
    read_segments(r, *h, out);
    return out.build_id;
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

std::optional<elf_facts> read_elf_facts(const std::string& path) {
    file_reader r(path);
    if (!r)
        return std::nullopt;
    return facts(r);
}

std::optional<std::uint64_t> file_offset_to_vaddr(const std::vector<elf_segment>& loads,
                                                  std::uint64_t offset) {
    for (const auto& s : loads)
        if (offset >= s.offset && offset - s.offset < s.filesz)
            return offset - s.offset + s.vaddr;
    return std::nullopt;
}

bool offsets_lost(const elf_facts& f) {
    return !f.text_in_file;
}

std::vector<elf_segment> rebuild_offsets(std::vector<elf_segment> loads) {
    std::uint64_t end = 0;
    for (auto& s : loads) {
        const std::uint64_t align = s.align > 1 ? s.align : 1;
        std::uint64_t at = end;
        if (align > 1 && (align & (align - 1)) == 0) {
            const std::uint64_t want = s.vaddr & (align - 1);
            at = (end & ~(align - 1)) + want;
            if (at < end)
                at += align;
        }
        s.offset = at;
        s.filesz = s.memsz; // code and read-only data: all of it was in the file
        end = at + s.memsz;
    }
    return loads;
}

} // namespace protocol
