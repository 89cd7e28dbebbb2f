// Reads a pprof profile back for the tests: gunzip, then just enough protobuf (fields as
// number and varint or bytes) to rebuild samples, locations, functions and mappings.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace test_support {

inline std::string gunzip(std::string_view in) {
    z_stream z{};
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        throw std::runtime_error("inflateInit2");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.avail_in = static_cast<uInt>(in.size());
    std::string out;
    char buffer[64 * 1024];
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        z.next_out = reinterpret_cast<Bytef*>(buffer);
        z.avail_out = sizeof buffer;
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            inflateEnd(&z);
            throw std::runtime_error("not a whole gzip stream");
        }
        out.append(buffer, sizeof buffer - z.avail_out);
    }
    inflateEnd(&z);
    return out;
}

struct pb_field {
    int number = 0;
    std::uint64_t value = 0;
    std::string_view bytes;
};

inline std::uint64_t pb_varint(std::string_view& in) {
    std::uint64_t v = 0;
    for (int shift = 0; !in.empty() && shift < 64; shift += 7) {
        const auto b = static_cast<unsigned char>(in.front());
        in.remove_prefix(1);
        v |= std::uint64_t{b & 0x7FU} << shift;
        if (!(b & 0x80))
            return v;
    }
    throw std::runtime_error("truncated varint");
}

inline std::vector<pb_field> pb_fields(std::string_view in) {
    std::vector<pb_field> out;
    while (!in.empty()) {
        const auto key = pb_varint(in);
        pb_field f;
        f.number = static_cast<int>(key >> 3);
        if ((key & 7) == 0) {
            f.value = pb_varint(in);
        } else if ((key & 7) == 2) {
            const auto n = pb_varint(in);
            if (n > in.size())
                throw std::runtime_error("truncated bytes");
            f.bytes = in.substr(0, n);
            in.remove_prefix(n);
        } else {
            throw std::runtime_error("unexpected wire type");
        }
        out.push_back(f);
    }
    return out;
}

inline std::vector<std::uint64_t> pb_packed(std::string_view in) {
    std::vector<std::uint64_t> out;
    while (!in.empty())
        out.push_back(pb_varint(in));
    return out;
}

// The parts of profile.proto the tests look at, names resolved through the string table.
struct pprof_data {
    struct line {
        std::string function, file;
        std::uint64_t number = 0;
    };
    struct location {
        std::uint64_t mapping = 0, address = 0;
        std::vector<line> lines; // innermost first
    };
    struct mapping {
        std::string file, build_id;
        bool has_functions = false, has_lines = false;
    };
    struct sample {
        std::vector<std::uint64_t> locations, values;
    };
    std::string raw; // the uncompressed bytes the views below point into
    std::vector<std::string> strings;
    std::vector<std::pair<std::string, std::string>> sample_types;
    std::vector<sample> samples;
    std::map<std::uint64_t, location> locations;
    std::vector<std::pair<std::uint64_t, mapping>> mappings; // in file order
    std::uint64_t period = 0, time_nanos = 0;
};

inline pprof_data read_pprof(std::string_view gz) {
    pprof_data d;
    d.raw = gunzip(gz);
    const auto top = pb_fields(d.raw);
    for (const auto& f : top)
        if (f.number == 6)
            d.strings.emplace_back(f.bytes);
    const auto str = [&](std::uint64_t i) { return d.strings.at(i); };
    std::map<std::uint64_t, std::pair<std::uint64_t, std::uint64_t>> functions; // name, file
    std::vector<std::pair<std::uint64_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>>>
        raw_locations;
    for (const auto& f : top) {
        if (f.number == 1) {
            std::uint64_t type = 0, unit = 0;
            for (const auto& v : pb_fields(f.bytes))
                (v.number == 1 ? type : unit) = v.value;
            d.sample_types.emplace_back(str(type), str(unit));
        } else if (f.number == 2) {
            pprof_data::sample s;
            for (const auto& v : pb_fields(f.bytes))
                (v.number == 1 ? s.locations : s.values) = pb_packed(v.bytes);
            d.samples.push_back(std::move(s));
        } else if (f.number == 3) {
            std::uint64_t id = 0;
            pprof_data::mapping m;
            for (const auto& v : pb_fields(f.bytes)) {
                if (v.number == 1)
                    id = v.value;
                if (v.number == 5)
                    m.file = str(v.value);
                if (v.number == 6)
                    m.build_id = str(v.value);
                if (v.number == 7)
                    m.has_functions = v.value;
                if (v.number == 9)
                    m.has_lines = v.value;
            }
            d.mappings.emplace_back(id, m);
        } else if (f.number == 4) {
            std::uint64_t id = 0;
            pprof_data::location l;
            std::vector<std::pair<std::uint64_t, std::uint64_t>> lines; // function id, line
            for (const auto& v : pb_fields(f.bytes)) {
                if (v.number == 1)
                    id = v.value;
                if (v.number == 2)
                    l.mapping = v.value;
                if (v.number == 3)
                    l.address = v.value;
                if (v.number == 4) {
                    std::pair<std::uint64_t, std::uint64_t> ln;
                    for (const auto& x : pb_fields(v.bytes))
                        (x.number == 1 ? ln.first : ln.second) = x.value;
                    lines.push_back(ln);
                }
            }
            d.locations[id] = l;
            raw_locations.emplace_back(id, std::move(lines));
        } else if (f.number == 5) {
            std::uint64_t id = 0, name = 0, file = 0;
            for (const auto& v : pb_fields(f.bytes)) {
                if (v.number == 1)
                    id = v.value;
                if (v.number == 2)
                    name = v.value;
                if (v.number == 4)
                    file = v.value;
            }
            functions[id] = {name, file};
        } else if (f.number == 12) {
            d.period = f.value;
        } else if (f.number == 9) {
            d.time_nanos = f.value;
        }
    }
    for (const auto& [id, lines] : raw_locations)
        for (const auto& [fn, number] : lines) {
            const auto& [name, file] = functions.at(fn);
            d.locations[id].lines.push_back({str(name), str(file), number});
        }
    return d;
}

} // namespace test_support
