// The symbolizer on real binaries (the demo built with this tree, and its readelf and
// addr2line output), the source view on a real capture, and the file browser's confinement.
#include "collector/export/exports.hpp"
#include "collector/http/settings.hpp"
#include "collector/parse/perf_script.hpp"
#include "collector/session_model.hpp"
#include "collector/symbols/debuginfod.hpp"
#include "collector/symbols/source_view.hpp"
#include "collector/symbols/subprocess.hpp"
#include "collector/symbols/symbolizer.hpp"
#include "protocol/build_id.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "support/fixtures.hpp"
#include "support/pprof_reader.hpp"

#include <catch2/catch.hpp>

#include <boost/json/serialize.hpp>
#include <boost/json/value_from.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>
#include <malloc.h>
#include <netinet/in.h>
#include <poll.h>
#include <set>
#include <sstream>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace collector;
namespace fs = std::filesystem;

namespace {

const std::string demo_bin = PERFWIRE_DEMO_BIN;
// Sites of a recording the owner imported: local files are read at the device's paths.
const std::string own(owner_recording);
const std::string demo_source = std::string(PERFWIRE_TEST_DIR) + "/../src/demo/demo.cpp";

// The line of `source` holding `marker`, 1-based; 0 when none does.
std::uint32_t line_of(const std::string& source, std::string_view marker) {
    std::istringstream in(source);
    std::uint32_t n = 0;
    for (std::string l; std::getline(in, l);) {
        ++n;
        if (l.find(marker) != std::string::npos)
            return n;
    }
    return 0;
}

// The line of demo.cpp holding `marker`.
std::uint32_t demo_line(const std::string& marker) {
    return line_of(test_support::file_bytes(demo_source), marker);
}

// A workload built for a test and its stripped copy (one build-id) in `dir`, and the HOME its
// recordings are made with: perf keeps what it records by build-id under $HOME/.debug, and
// would name the stripped copy's frames from the unstripped binary it kept there.
struct stripped_workload {
    std::string bin, stripped, build_id, bare_home; // bare_home: "HOME=…"
};
stripped_workload stripped_copy(const fs::path& dir, const std::string& bin) {
    stripped_workload w{
        bin, (dir / fs::path(bin).filename()).string(), {}, "HOME=" + (dir / "bare").string()};
    REQUIRE(run_capture({"strip", "--strip-all", "-o", w.stripped, bin}).code == 0);
    const auto id = protocol::read_build_id(bin);
    REQUIRE(id);
    w.build_id = *id;
    fs::create_directories(dir / "bare");
    return w;
}

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
        out.push_back(l);
    return out;
}

} // namespace

// A tool started while browsers and agents are connected must not keep their connections
// open: a keep-alive connection the collector then closes for idleness would stay open to the
// browser, which sends its next request into it and waits for an answer that never comes.
TEST_CASE("the tools the collector starts hold none of its connections", "[collector][symbols]") {
    int pair[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0); // as Asio opens them: no CLOEXEC
    // A second copy far above what a child opens for itself, so a listing cannot mistake one.
    const int high = ::fcntl(pair[0], F_DUPFD, 200);
    REQUIRE(high >= 200);
    // A one-shot tool (readelf, perf script): its own descriptors hold no copy.
    const auto listed = run_capture({"ls", "/proc/self/fd"});
    REQUIRE(listed.code == 0);
    const auto fds = split_lines(listed.out);
    CHECK(fds.size() >= 3); // its standard three (and the listing's own)
    CHECK(std::find(fds.begin(), fds.end(), std::to_string(high)) == fds.end());
    // A long-lived one (addr2line): an answer means it has run its program (a child before
    // exec still holds everything), then the peer must see the end as soon as it is closed.
    auto cat = coprocess::start({"cat"});
    REQUIRE(cat);
    std::vector<std::string> lines;
    REQUIRE(cat->exchange(
        "ping\n", lines, [](const std::string& l) { return l == "ping"; },
        std::chrono::seconds(10)));
    ::close(pair[0]);
    ::close(high);
    pollfd peer{pair[1], POLLIN, 0};
    REQUIRE(::poll(&peer, 1, 0) == 1);
    char byte = 0;
    CHECK(::read(pair[1], &byte, 1) == 0);
    ::close(pair[1]);
}

TEST_CASE("perf's names for symbol table names", "[collector][symbols]") {
    CHECK(strip_parameters("(anonymous namespace)::recursive_fib(int)") ==
          "(anonymous namespace)::recursive_fib");
    CHECK(strip_parameters("demo::sorter<int>::run(std::vector<int, std::allocator<int> >&, "
                           "unsigned int)") == "demo::sorter<int>::run");
    CHECK(strip_parameters("S::operator()(int) const") == "S::operator()");
    CHECK(strip_parameters("f(void (*)(int)) &&") == "f");
    CHECK(strip_parameters("main") == "main");
    CHECK(perf_symbol_name("_ZN12_GLOBAL__N_113recursive_fibEi") ==
          "(anonymous namespace)::recursive_fib");
    CHECK(perf_symbol_name("_ZN4demo6sorterIiE3runERSt6vectorIiSaIiEEj") ==
          "demo::sorter<int>::run");
    CHECK(perf_symbol_name("memcpy@GLIBC_2.14") == "memcpy");
    // A function template: perf shows neither its return type nor its parameters.
    CHECK(perf_symbol_name("_ZSt16__introsort_loopIN9__gnu_cxx17__normal_iteratorIPiSt6vectorIiSa"
                           "IiEEEElNS0_5__ops15_Iter_less_iterEEvT_S9_T0_T1_") ==
          "std::__introsort_loop<__gnu_cxx::__normal_iterator<int*, std::vector<int, "
          "std::allocator<int> > >, long, __gnu_cxx::__ops::_Iter_less_iter>");
    CHECK(strip_return_type("char const* f<int>") == "f<int>");
    CHECK(strip_return_type("bool std::operator==<char>") == "std::operator==<char>");
    CHECK(strip_return_type("(anonymous namespace)::g") == "(anonymous namespace)::g");
    CHECK(strip_return_type("A::operator bool") == "A::operator bool");
    CHECK(strip_return_type("operator new") == "operator new");
    CHECK(strip_return_type("non-virtual thunk to D::f") == "non-virtual thunk to D::f");
    CHECK(strip_return_type("virtual thunk to D::g<int>") == "virtual thunk to D::g<int>");
    CHECK(strip_return_type("TLS wrapper function for x") == "TLS wrapper function for x");
    CHECK(perf_symbol_name("_Znot_mangled_really") == "_Znot_mangled_really");
}

TEST_CASE("readelf symbols of a real PIE binary", "[collector][symbols]") {
    const auto c = run_capture({"readelf", "-sW", demo_bin});
    REQUIRE(c.code == 0);
    const auto syms = elf_symbols::parse_readelf(c.out);
    CHECK(syms.size() > 10);
    const auto fib = syms.address_of("(anonymous namespace)::recursive_fib");
    const auto mm = syms.address_of("(anonymous namespace)::matrix_multiply");
    REQUIRE(fib);
    REQUIRE(mm);
    CHECK(*fib != *mm);
    CHECK(*fib < 0x100000); // a PIE: link-time addresses, not where it was loaded
    CHECK(syms.address_of("demo::sorter<int>::run"));
    CHECK(syms.address_of("main"));
    CHECK_FALSE(syms.address_of("printf")); // undefined here: it lives in libc
    CHECK(run_capture({"/nonexistent/readelf"}).code == 127);
}

TEST_CASE("symbol tables stay within their share of the memory budget: the ones used longest "
          "ago are forgotten and read again when asked, a listing past half the share is not read",
          "[collector][symbols]") {
    const std::string collector_bin = PERFWIRE_COLLECTOR_BIN;
    symbolizer sym;
    CHECK(sym.table_bytes() == 0);
    sym.load_table(demo_bin, own);
    const auto demo_bytes = sym.table_bytes();
    sym.load_table(collector_bin, own);
    const auto both = sym.table_bytes();
    REQUIRE(demo_bytes > 0);
    REQUIRE(both > 2 * demo_bytes); // the collector has many more functions
    std::size_t collector_symbols = 0;
    for (const auto& b : sym.binaries())
        if (b.module == collector_bin)
            collector_symbols = b.symbols;
    REQUIRE(collector_symbols > 1000);
    // What a table says it holds is what the heap holds for it (where malloc says: not under
    // AddressSanitizer, whose allocator mallinfo2 does not see).
    const auto listing = run_capture({"readelf", "-SrsW", collector_bin});
    REQUIRE(listing.code == 0);
    const auto heap_before = ::mallinfo2().uordblks;
    const auto table = elf_symbols::parse_readelf(listing.out);
    const auto heap_after = ::mallinfo2().uordblks;
    INFO(table.memory_bytes() << " bytes said, " << heap_after - heap_before << " taken");
    CHECK(table.memory_bytes() > 40 * table.size());
    if (heap_after > heap_before) {
        CHECK(table.memory_bytes() * 10 >= (heap_after - heap_before) * 7);
        CHECK(table.memory_bytes() * 10 <= (heap_after - heap_before) * 13);
    }

    // A limit both do not fit in: the one used longest ago (the demo's) is forgotten.
    sym.set_table_limit(both - 1);
    CHECK_FALSE(sym.has_table(demo_bin, own));
    CHECK(sym.has_table(collector_bin, own));
    CHECK(sym.table_bytes() <= both - 1);
    // Asked for again, it is read again, and now the collector's is the older one.
    CHECK(sym.starts_of(demo_bin, own, "main").empty()); // (reads the table; no shared names)
    CHECK(sym.has_table(demo_bin, own));
    CHECK_FALSE(sym.has_table(collector_bin, own));
    CHECK(sym.table_bytes() == demo_bytes);

    // A share whose half the collector's listing exceeds: not read, and said.
    sym.set_table_limit(64 << 10);
    CHECK_FALSE(sym.name_frame(collector_bin, own, 0x1000));
    bool said = false;
    for (const auto& b : sym.binaries())
        if (b.module == collector_bin) {
            INFO(b.error);
            said = b.error.find("half of what the collector keeps for symbol tables") !=
                   std::string::npos;
        }
    CHECK(said);
    CHECK(sym.table_bytes() <= std::size_t{64} << 10);
}

TEST_CASE("addr2line output with inline chains, discriminators and unknowns",
          "[collector][symbols]") {
    // Captured from `addr2line -a -f -i -C` on the demo: two addresses inside std::sort code
    // inlined into demo::sorter<int>::run, one unknown, then the sentinel.
    const auto chains = parse_addr2line(
        split_lines(test_support::fixture("collector/fixtures/addr2line_inline.txt")));
    REQUIRE(chains.size() == 3);
    REQUIRE(chains[0].size() == 3);
    CHECK(chains[0][0].file == "/usr/include/c++/12/bits/stl_algo.h");
    CHECK(chains[0].back().function.rfind("demo::sorter<int>::run", 0) == 0);
    CHECK(chains[0].back().file.size() > 8);
    CHECK(chains[0].back().file.substr(chains[0].back().file.size() - 8) == "demo.cpp");
    CHECK(chains[1].size() == 5);
    CHECK(chains[2].empty());

    const auto d = parse_addr2line({"0x10", "f", "/src/a.c:42 (discriminator 3)", "0x20", "g",
                                    "/src/b.c:?", "0xffffffffffffffff", "??", "??:0"});
    REQUIRE(d.size() == 2);
    REQUIRE(d[0].size() == 1);
    CHECK(d[0][0].line == 42);
    CHECK(d[0][0].file == "/src/a.c");
    CHECK(d[1].empty());
}

TEST_CASE("symbolizer: sym+offset of a PIE lands on the function's own lines",
          "[collector][symbols]") {
    const auto hot = demo_line("// the hot line");
    REQUIRE(hot > 0);
    symbolizer sym;
    std::vector<symbolizer::site> sites;
    for (std::uint32_t off = 0; off < 0x90; off += 4)
        sites.push_back({demo_bin, "(anonymous namespace)::matrix_multiply", off, own});
    sites.push_back({demo_bin, "no_such_function", 0, own});
    sites.push_back({"[kernel.kallsyms]", "native_safe_halt", 0xe, own});
    sites.push_back({"/nonexistent/lib.so", "f", 1, own});
    const auto where = sym.resolve(sites);
    REQUIRE(where.size() == sites.size());
    std::set<std::uint32_t> lines;
    for (std::size_t i = 0; i + 3 < sites.size(); ++i) {
        REQUIRE_FALSE(where[i].chain.empty());
        const auto& outer = where[i].chain.back(); // the matrix_multiply frame of the chain
        CHECK(outer.file.find("demo.cpp") != std::string::npos);
        CHECK(outer.line >= hot - 8);
        CHECK(outer.line <= hot + 3);
        lines.insert(outer.line);
    }
    CHECK(lines.count(hot)); // the loop body is its own line, not the function's first
    CHECK(lines.size() > 2);
    // Addresses: the symbol's value in the binary plus the offset, one apart as the offsets are.
    REQUIRE(where[0].address);
    REQUIRE(where[1].address);
    CHECK(*where[1].address - *where[0].address == 4);
    for (std::size_t i = sites.size() - 3; i < sites.size(); ++i) {
        CHECK(where[i].chain.empty());
        CHECK_FALSE(where[i].address);
    }

    const auto bins = sym.binaries();
    REQUIRE(bins.size() == 3);
    for (const auto& b : bins) {
        if (b.module == demo_bin)
            CHECK(b.error.empty());
        else
            CHECK_FALSE(b.error.empty());
    }

    // A second pass is answered from the cache with the same result.
    const auto again = sym.resolve(sites);
    for (std::size_t i = 0; i < sites.size(); ++i) {
        CHECK(again[i].chain == where[i].chain);
        CHECK(again[i].address == where[i].address);
    }
}

namespace {

// This process's children running `name`.
std::size_t children_named(const std::string& name) {
    std::size_t n = 0;
    for (const auto& e : fs::directory_iterator("/proc")) {
        std::ifstream in(e.path() / "stat");
        std::string text;
        if (!std::getline(in, text))
            continue;
        const auto open = text.find('('), close = text.rfind(')');
        if (open == std::string::npos || close == std::string::npos)
            continue;
        std::istringstream rest(text.substr(close + 2));
        std::string state;
        long ppid = 0;
        rest >> state >> ppid;
        n += ppid == ::getpid() && text.substr(open + 1, close - open - 1) == name;
    }
    return n;
}

} // namespace

TEST_CASE("symbolizer: at most 16 addr2line processes at once, idle ones closed, what they "
          "answered kept",
          "[collector][symbols]") {
    test_support::temp_dir dir;
    std::vector<std::string> copies;
    for (int i = 0; i < 20; ++i) {
        const auto d = dir.path / ("lib" + std::to_string(i));
        fs::create_directories(d);
        fs::copy_file(demo_bin, d / "perfwire-demo");
        copies.push_back((d / "perfwire-demo").string());
    }
    symbolizer sym;
    const auto site = [&](int i, std::uint32_t off) {
        return symbolizer::site{copies[static_cast<std::size_t>(i)],
                                "(anonymous namespace)::matrix_multiply", off, own};
    };
    std::vector<source_chain> first;
    for (int i = 0; i < 20; ++i) {
        first.push_back(sym.resolve({site(i, 4)})[0].chain);
        REQUIRE_FALSE(first.back().empty());
        CHECK(children_named("addr2line") <= symbolizer::max_addr2line);
    }
    CHECK(children_named("addr2line") == symbolizer::max_addr2line);
    CHECK(sym.close_idle() == symbolizer::max_addr2line); // none idle for a minute yet
    // The first copy's process was closed: its answer comes from what it said before, and a
    // new address starts it again (closing the least recently used).
    CHECK(sym.resolve({site(0, 4)})[0].chain == first[0]);
    CHECK(sym.resolve({site(0, 8)})[0].chain.size() > 0);
    CHECK(children_named("addr2line") == symbolizer::max_addr2line);
    // Idle ones are closed (here: idle for no time at all).
    CHECK(sym.close_idle(std::chrono::seconds(0)) == 0);
    CHECK(children_named("addr2line") == 0);
    CHECK(sym.resolve({site(19, 4)})[0].chain == first[19]); // (from what it answered)
    CHECK(children_named("addr2line") == 0);
}

TEST_CASE("symbolizer: --binary, --sysroot, --path-map and --source-dir", "[collector][symbols]") {
    test_support::temp_dir dir;
    fs::create_directories(dir.path / "sysroot/opt/app/bin");
    fs::copy_file(demo_bin, dir.path / "sysroot/opt/app/bin/perfwire-demo");
    fs::create_directories(dir.path / "src/demo");
    fs::copy_file(demo_source, dir.path / "src/demo/demo.cpp");

    const symbolizer::site site{"/opt/app/bin/perfwire-demo",
                                "(anonymous namespace)::recursive_fib", 0};
    symbolizer sym;
    CHECK(sym.resolve({site})[0].chain.empty()); // no such path on this machine

    symbol_config c;
    c.sysroot = (dir.path / "sysroot").string();
    sym.configure(c);
    auto chain = sym.resolve({site})[0].chain;
    REQUIRE_FALSE(chain.empty());
    CHECK(chain.back().line == demo_line("std::uint64_t recursive_fib(int n)"));

    c = {};
    c.binaries = {(dir.path / "sysroot/opt/app/bin/perfwire-demo").string()};
    sym.configure(c);
    REQUIRE_FALSE(sym.resolve({site})[0].chain.empty());

    // The debug info names the build tree's path; map it to the copy, or find it by its tail.
    const std::string built = chain.back().file;
    const auto build_root =
        built.substr(0, built.size() - std::string("/src/demo/demo.cpp").size());
    c.path_map = {{build_root, dir.path.string()}};
    sym.configure(c);
    (void)sym.resolve({site});
    CHECK(sym.source_path(built) == (dir.path / "src/demo/demo.cpp").string());
    c.path_map = {};
    c.source_dirs = {dir.path.string()};
    sym.configure(c);
    (void)sym.resolve({site});
    CHECK(sym.source_path("/elsewhere/build/src/demo/demo.cpp") ==
          (dir.path / "src/demo/demo.cpp").string());
    CHECK_FALSE(sym.source_path("/elsewhere/nothing.cpp"));
    // Never the kernel's files (the collector's environment, its command line) nor what
    // peers sent, whatever debug info names them.
    CHECK_FALSE(sym.source_path("/proc/self/environ"));
    CHECK_FALSE(sym.source_path("/proc/self/cmdline"));
    c.peer_data_dirs = {(dir.path / "src").string()};
    sym.configure(c);
    CHECK_FALSE(sym.source_path("/elsewhere/build/src/demo/demo.cpp"));
    CHECK_FALSE(sym.source_path((dir.path / "src/demo/demo.cpp").string()));
}

namespace {

// The call-site test for one recording of `program` (the workload or its stripped copy).
void check_call_sites(const fs::path& dir, const std::string& program, const std::string& bin,
                      const std::string& id, const std::string& cached) {
    INFO(program);
    const std::string data = (dir / "perf.data").string();
    // A HOME of its own for each recording: perf keeps what it records in $HOME/.debug, where
    // the collector (like perf) would find the unstripped binary by its build-id.
    const auto home = dir / (program == bin ? "home-unstripped" : "home-stripped");
    fs::create_directories(home);
    const std::string bare = "HOME=" + home.string();
    REQUIRE(run_capture({"env", bare, "/usr/bin/perf", "record", "-q", "-e", "cpu-clock", "-F",
                         "999", "-g", "-o", data, "--", program, "1.5"})
                .code == 0);
    const auto script = run_capture({"env", bare, "/usr/bin/perf", "script", "-i", data, "-F",
                                     "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
    REQUIRE(script.code == 0);
    // The same samples with perf's names (for the stripped copy, from its cache).
    const auto named = run_capture({"env", cached, "/usr/bin/perf", "script", "-i", data, "-F",
                                    "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
    REQUIRE(named.code == 0);
    // The oracle, from objdump and perf's text alone. objdump: the return address of each
    // call in work(), as an offset into it. perf: per return offset, the weight of the stacks
    // where work() was there — what that call led to, whatever perf's unwinding shows below
    // it (a leaf without a frame pointer hides its own caller) — and, per callee, the weight
    // where that callee's frame is right below work's.
    const auto dis = run_capture({"objdump", "-d", "-C", "--no-show-raw-insn", bin});
    REQUIRE(dis.code == 0);
    std::map<std::uint32_t, std::string> callee_at; // return offset -> callee
    {
        std::istringstream in(dis.out);
        std::uint64_t start = 0;
        std::string pending; // the callee of the call just read
        bool in_work = false;
        for (std::string l; std::getline(in, l);) {
            if (l.ends_with(">:") && l[0] != ' ') { // "000000000000118b <name>:"
                in_work = l.find("<(anonymous namespace)::work()>:") != std::string::npos;
                start = std::stoull(l.substr(0, l.find(' ')), nullptr, 16);
                continue;
            }
            const auto colon = l.find(':');
            if (!in_work || colon == std::string::npos)
                continue;
            const auto address = std::stoull(l.substr(0, colon), nullptr, 16);
            if (!pending.empty())
                callee_at[static_cast<std::uint32_t>(address - start)] = pending;
            pending.clear();
            if (l.find("\tcall ") != std::string::npos) {
                for (const char* name : {"cheap", "costly"})
                    if (l.find(std::string("<(anonymous namespace)::") + name + "(") !=
                        std::string::npos)
                        pending = std::string("(anonymous namespace)::") + name;
            }
        }
    }
    REQUIRE(callee_at.size() == 3);
    std::map<std::uint32_t, std::uint64_t> below;        // work's return offset -> weight
    std::map<std::string, std::uint64_t> directly_below; // callee right below work -> weight
    std::uint64_t period = 0;
    std::string previous;
    std::istringstream lines(named.out);
    for (std::string l; std::getline(lines, l);) {
        if (!l.empty() && l[0] != '\t' && l[0] != ' ') {
            const auto colon = l.find(" cpu-clock:");
            const auto sp = l.rfind(' ', colon - 1);
            period = std::stoull(l.substr(sp + 1, colon - sp - 1));
            previous.clear();
            continue;
        }
        const auto at = l.find("(anonymous namespace)::work+0x");
        if (at != std::string::npos && !previous.empty()) {
            const auto offset = static_cast<std::uint32_t>(
                std::stoul(l.substr(at + std::string_view("(anonymous namespace)::work+0x").size()),
                           nullptr, 16));
            below[offset] += period;
            for (const char* name : {"cheap", "costly"})
                if (previous.find(std::string("(anonymous namespace)::") + name + "+0x") !=
                    std::string::npos)
                    directly_below[std::string("(anonymous namespace)::") + name] += period;
        }
        previous = l;
    }
    std::uint64_t via_costly = 0, via_cheap = 0;
    for (const auto& [offset, callee] : callee_at)
        (callee.ends_with("costly") ? via_costly : via_cheap) += below[offset];
    REQUIRE(via_costly > 0);

    // The collector parses the recording before it has the program's symbols (a device's
    // stripped binary: nameless frames, each with its address), then is given the unstripped
    // binary and names them in place.
    symbol_config c;
    c.debug_dirs.clear();
    c.build_id_cache = (home / ".debug").string();
    symbolizer sym(c);
    session_model m(&sym);
    m.device_build_ids[program] = id;
    REQUIRE(m.ingest(false, script.out));
    const auto& p = m.prof;
    c.binaries = {bin};
    sym.configure(c);
    const auto renamed = m.name_again();
    CHECK(renamed ==
          (program == bin ? script_parser::renaming::unchanged : script_parser::renaming::renamed));
    // As a parse with the symbols makes it, function by function.
    session_model fresh(&sym);
    fresh.device_build_ids[program] = id;
    REQUIRE(fresh.ingest(false, script.out));
    const auto table = [](const profile& of) {
        std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> out;
        for (const auto& r : functions(of, {}).rows)
            out[std::string(of.symbol(r.frame)) + " " + std::string(of.module(r.frame))] = {
                r.self, r.total};
        return out;
    };
    CHECK(table(p) == table(fresh.prof));
    CHECK(p.site_count() == fresh.prof.site_count());
    view_filter f;
    const auto answer =
        source_view(p, f, sym, {"", "(anonymous namespace)::work"}, m.device_build_ids);
    CHECK(
        boost::json::serialize(answer.body) ==
        boost::json::serialize(source_view(fresh.prof, f, sym, {"", "(anonymous namespace)::work"},
                                           fresh.device_build_ids)
                                   .body));
    INFO(boost::json::serialize(answer.body).substr(0, 800));
    REQUIRE(answer.status == 200);
    const auto& body = answer.body.as_object();
    const std::string file(body.at("file").as_string());
    CHECK(file.ends_with("callsites.cpp"));
    const std::string source =
        test_support::file_bytes(std::string(PERFWIRE_TEST_DIR) + "/workloads/callsites.cpp");
    const auto costly_line = line_of(source, "// the costly call"),
               first_cheap = line_of(source, "// the first cheap call"),
               second_cheap = line_of(source, "// the second cheap call");
    std::map<std::uint32_t, const boost::json::object*> by_line;
    for (const auto& l : body.at("lines").as_array())
        by_line[l.at("line").to_number<std::uint32_t>()] = &l.as_object();
    auto called = [&](std::uint32_t line) { // the weight below the calls on a line
        const auto* l = by_line.at(line);
        return l->at("total_value").to_number<std::uint64_t>() -
               l->at("value").to_number<std::uint64_t>();
    };
    // Every stack through the costly call is on its line, and nothing else is below it.
    CHECK(called(costly_line) == via_costly);
    CHECK(called(first_cheap) + called(second_cheap) == via_cheap);
    const auto& calls = by_line.at(costly_line)->at("calls").as_array();
    REQUIRE(calls.size() >= 1);
    CHECK(calls[0].at("name").as_string() == "(anonymous namespace)::costly");
    CHECK(calls[0].at("value").to_number<std::uint64_t>() ==
          directly_below["(anonymous namespace)::costly"]);
    // The costly line is the one opened on: the function's heaviest.
    CHECK(body.at("focus_line").to_number<std::uint32_t>() == costly_line);
    CHECK(body.at("view_total").to_number<std::uint64_t>() > via_costly);

    // Opened on costly(): where it was called from is work()'s costly line first, with what
    // perf's stacks show right below it there. (A sample on costly's first instruction,
    // before its frame is made, shows it called from main: perf's unwinding, kept as it is.)
    const auto callee =
        source_view(p, f, sym, {"", "(anonymous namespace)::costly"}, m.device_build_ids);
    REQUIRE(callee.status == 200);
    const auto& from = callee.body.at("called_from").as_array();
    REQUIRE(from.size() >= 1);
    CHECK(from[0].at("function").as_string() == "(anonymous namespace)::work");
    CHECK(from[0].at("line").to_number<std::uint32_t>() == costly_line);
    CHECK(std::string_view(from[0].at("file").as_string()).ends_with("callsites.cpp"));
    CHECK(from[0].at("value").to_number<std::uint64_t>() ==
          directly_below["(anonymous namespace)::costly"]);
    // cheap() is called from two lines of work(); together they weigh what perf's stacks say.
    if (directly_below["(anonymous namespace)::cheap"] > 0) {
        const auto cheap =
            source_view(p, f, sym, {"", "(anonymous namespace)::cheap"}, m.device_build_ids);
        REQUIRE(cheap.status == 200);
        std::uint64_t sum = 0;
        for (const auto& call : cheap.body.at("called_from").as_array()) {
            if (call.at("function").as_string() != "(anonymous namespace)::work")
                continue;
            const auto line = call.at("line").to_number<std::uint32_t>();
            CHECK((line == first_cheap || line == second_cheap));
            sum += call.at("value").to_number<std::uint64_t>();
        }
        CHECK(sum == directly_below["(anonymous namespace)::cheap"]);
    }
}

} // namespace

TEST_CASE("call sites: a source line weighs what its call led to, as perf's own stacks say — "
          "unstripped, and stripped with the symbols given to the collector after the parse",
          "[collector][symbols][perf]") {
    // A real program profiled by real perf: work() calls cheap(), costly(), cheap().
    test_support::temp_dir dir;
    const auto [bin, stripped, id, bare] = stripped_copy(dir.path, PERFWIRE_CALLSITES_BIN);
    (void)bare; // each recording has a HOME of its own
    // perf's text for the oracle is read with a HOME whose cache holds the unstripped binary.
    fs::create_directories(dir.path / "cached");
    const std::string cached = "HOME=" + (dir.path / "cached").string();
    REQUIRE(run_capture({"env", cached, "/usr/bin/perf", "buildid-cache", "-a", bin}).code == 0);
    for (const std::string& program : {bin, stripped})
        check_call_sites(dir.path, program, bin, id, cached);
}

TEST_CASE("two static work() in two files are told apart by where each starts, as perf's own "
          "srclines place them — unstripped, and stripped with the symbols at the collector",
          "[collector][symbols][perf]") {
    test_support::temp_dir dir;
    const auto [bin, stripped, id, bare] = stripped_copy(dir.path, PERFWIRE_STATICS_BIN);
    // perf's oracle for the stripped run is read with a HOME whose cache holds the unstripped
    // binary.
    fs::create_directories(dir.path / "cached");
    const std::string cached = "HOME=" + (dir.path / "cached").string();
    REQUIRE(run_capture({"env", cached, "/usr/bin/perf", "buildid-cache", "-a", bin}).code == 0);
    const std::string source_b =
        test_support::file_bytes(std::string(PERFWIRE_TEST_DIR) + "/workloads/statics_b.cpp");
    const auto cheap_loop = line_of(source_b, "// statics_b: the cheap loop");
    REQUIRE(cheap_loop > 0);

    for (const std::string& program : {bin, stripped}) {
        INFO(program);
        const std::string data = (dir.path / "perf.data").string();
        REQUIRE(run_capture({"env", bare, "/usr/bin/perf", "record", "-q", "-e", "cpu-clock", "-F",
                             "999", "-g", "-o", data, "--", program, "1.2"})
                    .code == 0);
        const auto script = run_capture({"env", bare, "/usr/bin/perf", "script", "-i", data, "-F",
                                         "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
        REQUIRE(script.code == 0);
        // The oracle: perf's srcline of each frame says which file's work() it is. Per file,
        // the weight where it is the leaf (self) and where it is on the stack (total).
        const auto oracle = run_capture({"env", cached, "/usr/bin/perf", "script", "-i", data, "-F",
                                         "period,ip,sym,symoff,srcline"});
        REQUIRE(oracle.code == 0);
        std::map<std::string, std::uint64_t> self, total;
        {
            std::uint64_t period = 0;
            bool leaf = false;
            std::set<std::string> on_stack;
            std::string frame;
            const auto end_sample = [&] {
                for (const auto& f : on_stack)
                    total[f] += period;
                on_stack.clear();
            };
            bool header = true; // the first line and each after a blank one: "   1001001 "
            for (const auto& l : split_lines(oracle.out)) {
                if (l.empty()) {
                    header = true;
                    continue;
                }
                if (std::exchange(header, false)) {
                    end_sample();
                    period = std::stoull(l);
                    leaf = true;
                    continue;
                }
                if (l[0] == '\t') {
                    frame = l;
                    continue;
                }
                // "  statics_b.cpp:8": the srcline of the frame above it.
                const bool work = frame.find(" work+0x") != std::string::npos;
                const auto file =
                    l.substr(l.find_first_not_of(' '), l.rfind(':') - l.find_first_not_of(' '));
                if (work) {
                    on_stack.insert(file);
                    if (leaf)
                        self[file] += period;
                }
                leaf = false;
            }
            end_sample();
        }
        REQUIRE(self["statics_a.cpp"] > 0);
        REQUIRE(self["statics_b.cpp"] > 0);
        CHECK(self.size() == 2);

        // The collector, with the unstripped binary for the device's build, as an agent would
        // have reported it.
        symbol_config c;
        c.binaries = {bin};
        c.debug_dirs.clear();
        c.build_id_cache = (dir.path / "bare" / ".debug").string();
        symbolizer sym(c);
        session_model m(&sym);
        m.device_build_ids[program] = id;
        REQUIRE(m.ingest(false, script.out));
        std::map<std::string, const function_row*> rows;
        const auto table = functions(m.prof, {});
        for (const auto& r : table.rows)
            if (m.prof.module(r.frame) == program)
                rows[std::string(m.prof.symbol(r.frame))] = &r;
        CHECK(rows.count("work") == 0);
        CHECK(rows.count("[unknown]") == 0);
        for (const std::string file : {"statics_a.cpp", "statics_b.cpp"}) {
            const auto name = "work (" + file + ")";
            REQUIRE(rows.count(name));
            CHECK(rows.at(name)->self == self[file]);
            CHECK(rows.at(name)->total == total[file]);
        }

        // Its Source tab opens its own file, where its weight is.
        const auto answer =
            source_view(m.prof, {}, sym, {"", "work (statics_b.cpp)"}, m.device_build_ids);
        INFO(boost::json::serialize(answer.body).substr(0, 600));
        REQUIRE(answer.status == 200);
        CHECK(std::string_view(answer.body.at("file").as_string()).ends_with("statics_b.cpp"));
        std::uint64_t placed_in_b = 0;
        for (const auto& l : answer.body.at("lines").as_array())
            placed_in_b += l.at("value").to_number<std::uint64_t>();
        const auto self_of = [&](const std::string& fn) {
            return rows.count(fn) ? rows.at(fn)->self : 0;
        };
        CHECK(placed_in_b == self["statics_b.cpp"] + self_of("run_b") +
                                 self_of("mix_b")); // the file's other functions too
        const auto focus = answer.body.at("focus_line").to_number<std::uint32_t>();
        CHECK(focus + 1 >= cheap_loop);
        CHECK(focus <= cheap_loop + 1);
        // Called from run_b's line that calls it (a caller the collector named, stripped).
        const auto& from = answer.body.at("called_from").as_array();
        REQUIRE_FALSE(from.empty());
        CHECK(from[0].at("function").as_string() == "run_b");
        CHECK(from[0].at("line").to_number<std::uint32_t>() ==
              line_of(source_b, "// run_b calls its work()"));

        // pprof: each sample's leaf in work() sits in its own file.
        const auto pp =
            test_support::read_pprof(pprof_profile(m.prof, {}, {&sym, &m.device_build_ids, 1}));
        std::map<std::string, std::uint64_t> leaf_in;
        for (const auto& s : pp.samples) {
            const auto& leaf = pp.locations.at(s.locations.at(0));
            if (leaf.lines.empty() || !leaf.lines.back().function.starts_with("work"))
                continue;
            leaf_in[fs::path(leaf.lines.back().file).filename().string()] += s.values.at(1);
        }
        CHECK(leaf_in == self);
    }
}

TEST_CASE("PLT stubs of a hot loop calling a shared library are named foo@plt at the collector "
          "as perf names them — unstripped, and stripped with the symbols at the collector",
          "[collector][symbols][perf]") {
    test_support::temp_dir dir;
    const auto [bin, stripped, id, bare] = stripped_copy(dir.path, PERFWIRE_PLT_BIN);
    for (const std::string& program : {bin, stripped}) {
        INFO(program);
        const std::string data = (dir.path / "perf.data").string();
        REQUIRE(run_capture({"env", bare, "/usr/bin/perf", "record", "-q", "-e", "cpu-clock", "-F",
                             "999", "-o", data, "--", program, "1"})
                    .code == 0);
        const auto script = run_capture({"env", bare, "/usr/bin/perf", "script", "-i", data, "-F",
                                         "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
        REQUIRE(script.code == 0);
        // The oracle: perf's own names of the samples in the program, weighed by period.
        std::map<std::string, std::uint64_t> perf_self;
        const std::string in_program = " (" + program + ")";
        for (const auto& l : split_lines(script.out)) {
            const auto colon = l.find(" cpu-clock:");
            if (colon == std::string::npos || !l.ends_with(in_program))
                continue;
            const auto period = std::stoull(l.substr(l.rfind(' ', colon - 1) + 1));
            const auto frame = l.substr(l.find_first_not_of(' ', colon + 11));
            auto name = frame.substr(frame.find(' ') + 1);
            name = name.substr(0, name.size() - in_program.size());
            perf_self[name.substr(0, name.rfind("+0x"))] += period;
        }
        REQUIRE(perf_self["plt_step@plt"] > 0);

        // The collector names every frame of the program itself (resymbolize).
        symbol_config c;
        c.binaries = {bin};
        c.debug_dirs.clear();
        c.build_id_cache = (dir.path / "bare" / ".debug").string();
        c.resymbolize = {program};
        symbolizer sym(c);
        session_model m(&sym);
        m.device_build_ids[program] = id;
        REQUIRE(m.ingest(false, script.out));
        std::map<std::string, std::uint64_t> ours;
        for (const auto& r : functions(m.prof, {}).rows)
            if (m.prof.module(r.frame) == program)
                ours[std::string(m.prof.symbol(r.frame))] += r.self;
        INFO(boost::json::serialize(boost::json::value_from(ours)));
        CHECK(ours["plt_step@plt"] == perf_self["plt_step@plt"]);
        CHECK(ours.count("_init") == 0);
        CHECK(ours.count("[unknown]") == 0);
        // Unstripped, perf named every sample: the collector names each the same.
        if (program == bin)
            CHECK(ours == perf_self);
    }
}

TEST_CASE("source view: an entry into the kernel weighs on the line it interrupted, named as "
          "no call",
          "[collector][symbols]") {
    // The same instruction of matrix_multiply sampled twice: once itself, once with the
    // kernel's timer interrupt above it (perf's stack then holds the interrupted address).
    profile p;
    script_parser parser(p);
    std::ostringstream text;
    text << "demo-matrix 1/2 10.0: 1000 cpu-clock:\n\t1364 (anonymous "
            "namespace)::matrix_multiply+0x64 ("
         << demo_bin << ")\n\n"
         << "demo-matrix 1/2 10.1: 1000 cpu-clock:\n\tffffffff81001000 "
            "asm_sysvec_apic_timer_interrupt+0x1a ([kernel.kallsyms])\n\t1364 (anonymous "
            "namespace)::matrix_multiply+0x64 ("
         << demo_bin << ")\n\n";
    parser.feed(text.str());
    parser.finish();
    symbolizer sym;
    view_filter f;
    const auto answer =
        source_view(p, f, sym, {"", "(anonymous namespace)::matrix_multiply"}, {}, own);
    REQUIRE(answer.status == 200);
    std::uint64_t own_value = 0, total = 0;
    for (const auto& l : answer.body.at("lines").as_array()) {
        CHECK(!l.as_object().contains("calls")); // the interrupt is not listed as a call
        own_value += l.at("value").to_number<std::uint64_t>();
        total += l.at("total_value").to_number<std::uint64_t>();
    }
    CHECK(own_value == 1000);
    CHECK(total == 2000); // on the interrupted instruction's line, as its own sample is
    const auto lines = answer.body.at("lines").as_array();
    const auto line_of_value = [&](const char* field) {
        for (const auto& l : lines)
            if (l.at(field).to_number<std::uint64_t>() > 0)
                return l.at("line").to_number<std::uint32_t>();
        return 0U;
    };
    CHECK(line_of_value("value") == line_of_value("total_value"));
}

TEST_CASE("source view: every column of the same total, a line counted once per stack even "
          "when the function recurses",
          "[collector][symbols]") {
    // The return address of recursive_fib's first call to itself, from its machine code.
    const auto dis = run_capture({"objdump", "-d", "--no-show-raw-insn", "-C", demo_bin});
    REQUIRE(dis.code == 0);
    std::uint64_t start = 0, ret = 0;
    bool inside = false, after_call = false;
    for (const auto& l : split_lines(dis.out)) {
        if (l.find("recursive_fib(int)>:") != std::string::npos) {
            start = std::stoull(l, nullptr, 16);
            inside = true;
            continue;
        }
        if (!inside || l.find(':') == std::string::npos)
            continue;
        if (after_call) {
            ret = std::stoull(l, nullptr, 16);
            break;
        }
        after_call =
            l.find("call") != std::string::npos && l.find("recursive_fib") != std::string::npos;
    }
    REQUIRE(ret > start);
    std::ostringstream off;
    off << "0x" << std::hex << (ret - start);
    const std::string fib = "(anonymous namespace)::recursive_fib", at = " (" + demo_bin + ")";
    // Leaf first: 100 ns three deep in the recursion, 50 ns one deep; 150 in all, all of it
    // through recursive_fib (its total), the recursive call's line on every stack.
    profile p;
    script_parser parser(p);
    std::ostringstream text;
    text << "demo-recurse 1/3 10.0: 100 cpu-clock:\n\t23b7 " << fib << "+0x0" << at << "\n\t23d5 "
         << fib << "+" << off.str() << at << "\n\t23d5 " << fib << "+" << off.str() << at
         << "\n\t2000 main+0x10" << at << "\n\n"
         << "demo-recurse 1/3 10.1: 50 cpu-clock:\n\t23b7 " << fib << "+0x0" << at << "\n\t23d5 "
         << fib << "+" << off.str() << at << "\n\t2000 main+0x10" << at << "\n\n";
    parser.feed(text.str());
    parser.finish();
    symbolizer sym;
    const auto answer = source_view(p, {}, sym, {"", fib}, {}, own);
    REQUIRE(answer.status == 200);
    INFO(boost::json::serialize(answer.body));
    CHECK(answer.body.at("view_total").to_number<int>() == 150);
    double self_sum = 0;
    std::uint64_t call_line_total = 0;
    for (const auto& l : answer.body.at("lines").as_array()) {
        const auto total = l.at("total_value").to_number<std::uint64_t>();
        CHECK(total <= 150); // never above the function's own total
        // One denominator: self and total are shares of the view's 150.
        CHECK(l.at("pct").as_double() == Approx(100.0 * l.at("value").to_number<double>() / 150));
        CHECK(l.at("total_pct").as_double() == Approx(100.0 * static_cast<double>(total) / 150));
        CHECK(l.at("pct").as_double() <= l.at("total_pct").as_double() + 1e-9);
        self_sum += l.at("self_pct").as_double();
        if (const auto* calls = l.as_object().if_contains("calls")) {
            for (const auto& c : calls->as_array())
                if (c.at("name").as_string() == fib) {
                    CHECK(c.at("value").to_number<int>() == 150); // once per stack
                    call_line_total = total;
                }
        }
    }
    CHECK(self_sum == Approx(100));
    CHECK(call_line_total == 150);
    // Called from: the recursive call holds each stack once (150), main's call all of it too.
    std::map<std::string, std::uint64_t> from;
    for (const auto& c : answer.body.at("called_from").as_array())
        from[std::string(c.at("function").as_string())] += c.at("value").to_number<std::uint64_t>();
    CHECK(from[fib] == 150);
    CHECK(from["main"] == 150);
}

TEST_CASE("source view: lines of a real capture, files only from the debug info",
          "[collector][symbols]") {
    // Sites made the way the parser makes them, at addresses inside the demo's functions.
    profile p;
    script_parser parser(p);
    std::ostringstream text;
    for (int i = 0; i < 40; ++i)
        text << "demo-matrix 1/2 10." << 100 + i << ": 1000 cpu-clock:\n\t1300 "
             << "(anonymous namespace)::matrix_multiply+0x" << std::hex << (0x30 + (i % 8) * 4)
             << std::dec << " (" << demo_bin << ")\n\n";
    text << "demo-recurse 1/3 11.000: 1000 cpu-clock:\n\t1377 (anonymous "
            "namespace)::recursive_fib+0x0 ("
         << demo_bin << ")\n\n";
    parser.feed(text.str());
    parser.finish();
    REQUIRE(p.sample_count() == 41);

    // The device is this machine (--sysroot /); perf's build-id cache here is left out, so
    // what is found does not depend on what ran before.
    test_support::temp_dir dir;
    symbol_config here;
    here.sysroot = "/";
    here.build_id_cache = (dir.path / "no-cache").string();
    symbolizer sym(here);
    view_filter f;
    const auto files = source_view(p, f, sym, {}, {}, own);
    REQUIRE(files.status == 200);
    const auto& list = files.body.at("files").as_array();
    REQUIRE(list.size() >= 1);
    const std::string file(list[0].at("file").as_string());
    CHECK(file.find("demo.cpp") != std::string::npos);
    CHECK(list[0].at("found").as_bool());

    const auto by_fn =
        source_view(p, f, sym, {"", "(anonymous namespace)::matrix_multiply"}, {}, own);
    REQUIRE(by_fn.status == 200);
    CHECK(by_fn.body.at("file").as_string() == file);
    const auto& lines = by_fn.body.at("lines").as_array();
    std::uint64_t samples = 0;
    double share = 0;
    for (const auto& l : lines) {
        samples += l.at("samples").to_number<std::uint64_t>();
        share += l.at("pct").as_double();
    }
    CHECK(samples == 41);
    CHECK(share == Approx(100.0));
    const auto hot = by_fn.body.at("hottest_line").to_number<std::uint32_t>();
    // The function asked for: its own hottest line (recursive_fib's single sample is elsewhere).
    const auto focus = by_fn.body.at("focus_line").to_number<std::uint32_t>();
    CHECK(focus == hot);
    const auto fib =
        source_view(p, f, sym, {file, "(anonymous namespace)::recursive_fib"}, {}, own);
    REQUIRE(fib.status == 200);
    CHECK(fib.body.at("focus_line").to_number<std::uint32_t>() ==
          demo_line("std::uint64_t recursive_fib(int n)"));
    CHECK(lines[hot - 1].at("text").as_string().size() > 0);
    CHECK(lines[hot - 1].at("line").to_number<std::uint32_t>() == hot);

    // The device's build-id against the local copy's: a different build is called out.
    const auto local_id = protocol::read_build_id(demo_bin);
    REQUIRE(local_id);
    const auto binary_of = [&](const boost::json::value& body) -> const boost::json::object& {
        for (const auto& b : body.at("binaries").as_array())
            if (b.at("module").as_string() == demo_bin)
                return b.as_object();
        FAIL("no binaries entry for the demo");
        throw;
    };
    CHECK(files.body.at("warnings").as_array().empty());
    CHECK(binary_of(files.body).at("build_matches").is_null()); // the device said nothing
    const auto same = source_view(p, f, sym, {}, {{demo_bin, *local_id}});
    CHECK(same.body.at("warnings").as_array().empty());
    CHECK(binary_of(same.body).at("build_matches") == true);
    // Another build is refused, not used: no lines, and the listing says what was tried.
    CHECK(source_view(p, f, sym, {file, ""}, {{demo_bin, "0123456789abcdef"}}).status == 404);
    const auto other = source_view(p, f, sym, {}, {{demo_bin, "0123456789abcdef"}});
    const auto& warnings = other.body.at("warnings").as_array();
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].as_string().find("--debug-dir") != boost::json::string::npos);
    const auto& refused = binary_of(other.body);
    CHECK(refused.at("build_matches") == false);
    CHECK(refused.at("path").as_string().empty());
    CHECK(
        boost::json::serialize(refused.at("tried")).find("another build (build-id " + *local_id) !=
        std::string::npos);

    // The thread filter applies: recurse's thread has its one sample, on recursive_fib.
    view_filter one_thread;
    one_thread.tid = 3;
    const auto recurse = source_view(p, one_thread, sym, {file, ""}, {}, own);
    REQUIRE(recurse.status == 200);
    CHECK(recurse.body.at("samples").to_number<std::uint64_t>() == 1);
    CHECK(recurse.body.at("hottest_line").to_number<std::uint32_t>() ==
          demo_line("std::uint64_t recursive_fib(int n)"));

    // Only files the debug info named can be asked for: nothing else is ever opened.
    CHECK(source_view(p, f, sym, {"/etc/passwd", ""}, {}, own).status == 404);
    CHECK(source_view(p, f, sym, {"", "no_such_function"}, {}, own).status == 404);
}

TEST_CASE("pprof export: leaf addresses and lines from the symbolizer, callers by function, "
          "the device's build-id",
          "[collector][symbols][export]") {
    // matrix_multiply sampled at four offsets, called from matrix_worker, under a libc frame.
    profile p;
    script_parser parser(p);
    std::ostringstream text;
    for (int i = 0; i < 40; ++i)
        text << "demo-matrix 1/2 10." << 100 + i << ": 1000 cpu-clock:\n\t1300 "
             << "(anonymous namespace)::matrix_multiply+0x" << std::hex << (0x30 + (i % 4) * 4)
             << std::dec << " (" << demo_bin
             << ")\n\t1400 (anonymous namespace)::matrix_worker+0x1f (" << demo_bin
             << ")\n\t7f00 start_thread+0x2f3 (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\n";
    parser.feed(text.str());
    parser.finish();
    REQUIRE(p.sample_count() == 40);

    // The device's build is found where the owner said (--binary), whatever perf's build-id
    // cache in $HOME holds.
    symbol_config c;
    c.binaries = {demo_bin};
    c.build_id_cache = "/nonexistent";
    symbolizer sym(c);
    const auto demo_id = protocol::read_build_id(demo_bin);
    REQUIRE(demo_id);
    const std::map<std::string, std::string> build_ids{{demo_bin, *demo_id}};
    const auto pp = test_support::read_pprof(pprof_profile(p, {}, {&sym, &build_ids, 1234}));
    CHECK(pp.time_nanos == 1234);
    REQUIRE(pp.mappings.size() == 2);
    CHECK(pp.mappings[0].second.file == demo_bin); // the program first, libc after
    CHECK(pp.mappings[0].second.build_id == *demo_id);
    CHECK(pp.mappings[0].second.has_lines);
    CHECK(pp.mappings[1].second.build_id.empty()); // nothing known: nothing claimed

    // What the symbolizer says of each sampled instruction and of the caller's call (the
    // instruction before its return address, matrix_worker+0x1f).
    std::vector<symbolizer::site> sites;
    for (std::uint32_t off = 0x30; off < 0x40; off += 4)
        sites.push_back({demo_bin, "(anonymous namespace)::matrix_multiply", off, own});
    sites.push_back({demo_bin, "(anonymous namespace)::matrix_worker", 0x1e, own});
    const auto where = sym.resolve(sites);
    std::map<std::uint64_t, source_chain> expected;
    for (std::size_t i = 0; i + 1 < where.size(); ++i) {
        REQUIRE(where[i].address);
        expected[*where[i].address] = where[i].chain;
    }
    REQUIRE(pp.samples.size() == 4); // one per instruction
    for (const auto& s : pp.samples) {
        CHECK(s.values == std::vector<std::uint64_t>{10, 10000});
        REQUIRE(s.locations.size() == 3);
        const auto& leaf = pp.locations.at(s.locations[0]);
        REQUIRE(expected.count(leaf.address));
        const auto& chain = expected.at(leaf.address);
        REQUIRE(leaf.lines.size() == chain.size());
        for (std::size_t k = 0; k < chain.size(); ++k) {
            CHECK(leaf.lines[k].number == chain[k].line);
            CHECK(leaf.lines[k].file == chain[k].file);
        }
        CHECK(leaf.lines.back().function == "(anonymous namespace)::matrix_multiply");
        CHECK(leaf.lines.back().number > 0);
        // The caller at its call, with the call's line (and the inline chain there).
        const auto& caller = pp.locations.at(s.locations[1]);
        REQUIRE(where.back().address);
        CHECK(caller.address == *where.back().address);
        const auto& call = where.back().chain;
        REQUIRE(caller.lines.size() == call.size());
        for (std::size_t k = 0; k < call.size(); ++k) {
            CHECK(caller.lines[k].number == call[k].line);
            CHECK(caller.lines[k].file == call[k].file);
        }
        CHECK(caller.lines.back().function == "(anonymous namespace)::matrix_worker");
        CHECK(caller.lines.back().number > 0);
        const auto& libc = pp.locations.at(s.locations[2]);
        CHECK(libc.lines.at(0).function == "start_thread");
        CHECK(libc.mapping == pp.mappings[1].first);
    }

    // Without a symbolizer: the same samples and functions, no addresses or lines.
    const auto bare = test_support::read_pprof(pprof_profile(p, {}));
    REQUIRE(bare.samples.size() == 4);
    for (const auto& [id, l] : bare.locations) {
        CHECK(l.address == 0);
        CHECK(l.lines.at(0).number == 0);
    }
}

TEST_CASE("pprof export: at every instruction of the demo's hot functions, each line is in its "
          "own file, as the symbolizer and the Source tab place it",
          "[collector][symbols][export]") {
    // Debug info leaves gaps: a sanitized build's hash_strings has instructions at a line of
    // stl_iterator.h that no inlined call covers. Such a line is the header's, not that number
    // in demo.cpp. One sample at each byte of each function, from its size in the symbol table.
    const auto table = run_capture({"readelf", "-sW", demo_bin});
    REQUIRE(table.code == 0);
    std::map<std::string, std::uint32_t> sizes;
    for (std::istringstream in(table.out); in;) {
        std::string num, value, size, type, bind, vis, ndx, name;
        in >> num >> value >> size >> type >> bind >> vis >> ndx >> name;
        in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
        for (const char* fn : {"hash_strings", "matrix_multiply", "recursive_fib"})
            if (type == "FUNC" && name.find(fn) != std::string::npos)
                sizes[std::string("(anonymous namespace)::") + fn] = std::stoul(size, nullptr, 0);
    }
    REQUIRE(sizes.size() == 3);
    profile p;
    script_parser parser(p);
    std::ostringstream text;
    std::vector<symbolizer::site> sites;
    for (const auto& [fn, size] : sizes)
        for (std::uint32_t off = 0; off < size; ++off) {
            text << "demo 1/1 10.5: 1000 cpu-clock:\n\t1300 " << fn << "+0x" << std::hex << off
                 << std::dec << " (" << demo_bin << ")\n\n";
            sites.push_back({demo_bin, fn, off, own});
        }
    parser.feed(text.str());
    parser.finish();
    REQUIRE(p.sample_count() == sites.size());

    symbolizer sym;
    const auto where = sym.resolve(sites);
    std::map<std::uint64_t, source_chain> expected;
    for (const auto& w : where) {
        REQUIRE(w.address);
        expected[*w.address] = w.chain;
    }
    const auto pp = test_support::read_pprof(pprof_profile(p, {}, {&sym, nullptr, 1, own}));
    std::size_t compared = 0;
    for (const auto& s : pp.samples) {
        const auto& leaf = pp.locations.at(s.locations.at(0));
        const auto it = expected.find(leaf.address);
        REQUIRE(it != expected.end());
        const auto& chain = it->second;
        if (chain.empty()) { // no line known: the function alone
            CHECK(leaf.lines.size() == 1);
            CHECK(leaf.lines.at(0).number == 0);
            continue;
        }
        INFO(leaf.address << " " << chain.back().file << ":" << chain.back().line);
        REQUIRE(leaf.lines.size() == chain.size());
        for (std::size_t k = 0; k < chain.size(); ++k) {
            CHECK(leaf.lines[k].file == chain[k].file);
            CHECK(leaf.lines[k].number == chain[k].line);
        }
        ++compared;
    }
    CHECK(pp.samples.size() == sites.size());
    CHECK(compared * 10 > sites.size() * 9); // lines for (nearly) all of them
}

TEST_CASE("file browser stays under its root, links included", "[collector][api]") {
    test_support::temp_dir dir;
    fs::create_directories(dir.path / "root/bin");
    fs::create_directories(dir.path / "outside");
    std::ofstream(dir.path / "root/bin/app") << "x";
    fs::permissions(dir.path / "root/bin/app", fs::perms::owner_exec, fs::perm_options::add);
    fs::create_directory_symlink(dir.path / "outside", dir.path / "root/escape");
    std::ofstream(dir.path / "outside/secret") << std::string(12345, 'x');
    fs::create_symlink(dir.path / "outside/secret", dir.path / "root/peek");
    fs::create_symlink(dir.path / "root/bin/app", dir.path / "root/app-link");
    const auto root = (dir.path / "root").string();

    auto r = browse(root, "");
    REQUIRE(r.status == 200);
    CHECK(r.body.at("parent").is_null());
    const auto& entries = r.body.at("entries").as_array();
    REQUIRE(entries.size() == 4);
    CHECK(entries[0].at("name").as_string() == "bin");
    CHECK(entries[0].at("type").as_string() == "dir");
    // Links out of the root say nothing of their target (not even its size); links inside do.
    for (const auto& e : entries) {
        INFO(boost::json::serialize(e));
        if (e.at("name") == "peek" || e.at("name") == "escape") {
            CHECK(e.at("type").as_string() == "link");
            CHECK(e.at("size").to_number<std::uint64_t>() == 0);
        }
        if (e.at("name") == "app-link")
            CHECK(e.at("type").as_string() == "file");
    }

    r = browse(root, "bin");
    REQUIRE(r.status == 200);
    CHECK(r.body.at("entries").as_array()[0].at("executable").as_bool());
    CHECK(r.body.at("parent").as_string() == root);

    CHECK(browse(root, "..").status == 403);
    CHECK(browse(root, "bin/../../outside").status == 403);
    CHECK(browse(root, "escape").status == 403); // a symlink out of the root
    CHECK(browse(root, "/etc").status == 403);
    CHECK(browse(root, root + "/bin").status == 200);
    CHECK(browse(root, "bin/app").status == 400);
    CHECK(browse(root, "nothing").status == 404);
    fs::create_directories(dir.path / "rootx");
    CHECK(browse(root, root + "x").status == 403); // a sibling sharing the root's prefix
}

TEST_CASE("config updates are checked field by field, within what the owner allowed",
          "[collector][api]") {
    test_support::temp_dir dir;
    const auto root = fs::canonical(dir.path).string();
    const config_limits limits{root, {"", "aarch64-linux-gnu-"}};
    symbol_config c;
    // The message a refused update gives; empty when it was applied.
    auto refusal = [&](const boost::json::object& body) {
        const auto r = update_config(c, body, limits);
        if (r)
            return std::string();
        CHECK(r.error().code == "bad_config");
        CHECK_FALSE(r.error().message.empty());
        return r.error().message;
    };
    CHECK(refusal({{"binaries", "x"}}) == "binaries must be an array of strings");
    CHECK_FALSE(refusal({{"path_map", boost::json::array{1}}}).empty());
    CHECK(c.binaries.empty()); // nothing applied from a bad update

    // Only a toolchain the collector found: never a program a request names.
    for (const char* evil : {"/tmp/x/evil-", "-x", "a; rm -rf /", "../../tmp/evil-", "x86_64-"})
        CHECK_THAT(refusal({{"toolchain_prefix", evil}}),
                   Catch::StartsWith("toolchain_prefix must be one of the toolchains the "
                                     "collector found: \"\", aarch64-linux-gnu-"));
    CHECK(c.toolchain_prefix.empty());

    // Files and folders only under the browse root, links resolved first.
    fs::create_directory_symlink("/etc", dir.path / "etc-link");
    const std::vector<std::pair<const char*, boost::json::value>> outside = {
        {"binaries", boost::json::array{"/etc/passwd"}},
        {"binaries", boost::json::array{(dir.path / "etc-link/passwd").string()}},
        {"binaries", boost::json::array{(dir.path / "../x").string()}},
        {"binaries", boost::json::array{"relative/bin"}},
        {"source_dirs", boost::json::array{"/"}},
        {"sysroot", "/"},
        {"path_map", boost::json::array{boost::json::object{{"from", "/b"}, {"to", "/root"}}}}};
    for (const auto& [field, value] : outside) {
        INFO(field << " = " << boost::json::serialize(value));
        CHECK_FALSE(refusal({{field, value}}).empty());
    }
    CHECK(c.binaries.empty());
    CHECK(c.sysroot.empty());

    const auto src = (dir.path / "src").string();
    CHECK(refusal({{"source_dirs", boost::json::array{src.c_str()}},
                   {"inline", false},
                   {"toolchain_prefix", "aarch64-linux-gnu-"},
                   {"path_map", boost::json::array{boost::json::object{
                                    {"from", "/b"}, {"to", (root + "/s").c_str()}}}}})
              .empty());
    CHECK(c.source_dirs == std::vector<std::string>{src});
    CHECK_FALSE(c.inline_frames);
    CHECK(c.toolchain_prefix == "aarch64-linux-gnu-");
    REQUIRE(c.path_map.size() == 1);
    CHECK(c.path_map[0] == std::pair<std::string, std::string>{"/b", root + "/s"});

    // What the owner set on the command line stays allowed when the UI sends it back.
    c.source_dirs = {"/opt/src"};
    c.sysroot = "/srv/board";
    CHECK(refusal({{"source_dirs", boost::json::array{"/opt/src", src}}, {"sysroot", "/srv/board"}})
              .empty());
    CHECK(c.source_dirs.size() == 2);

    const auto j = config_json(c, limits);
    CHECK(boost::json::serialize(j.at("toolchains")) == R"(["","aarch64-linux-gnu-"])");
    CHECK(j.at("browse_root").as_string() == root);
}

TEST_CASE("toolchains are the addr2line and readelf pairs found on PATH", "[collector][symbols]") {
    test_support::temp_dir dir;
    const auto bin = dir.path / "bin";
    fs::create_directories(bin);
    auto tool = [&](const std::string& name, bool executable) {
        std::ofstream(bin / name) << "#!/bin/sh\n";
        if (executable)
            fs::permissions(bin / name, fs::perms::owner_exec, fs::perm_options::add);
    };
    for (const char* n : {"addr2line", "readelf", "aarch64-linux-gnu-addr2line",
                          "aarch64-linux-gnu-readelf", "lonely-addr2line"})
        tool(n, true);
    tool("x-addr2line", false);
    tool("x-readelf", false);
    fs::create_directories(dir.path / "empty");
    const auto path =
        "relative/bin::" + bin.string() + ":" + (dir.path / "empty").string() + ":/nonexistent";
    CHECK(find_toolchains(path, "/opt/cross/bin/arm-") ==
          std::vector<std::string>{"", "/opt/cross/bin/arm-", "aarch64-linux-gnu-"});
    CHECK(find_toolchains("", "") == std::vector<std::string>{""});
}

TEST_CASE("binutils run only on regular ELF files, whatever a hostile agent names",
          "[collector][symbols]") {
    test_support::temp_dir dir;
    // A toolchain that notes every file it is run on, then runs the real tool.
    const auto ran = dir.path / "ran";
    for (const char* t : {"readelf", "addr2line"}) {
        const auto spy = dir.path / (std::string("spy-") + t);
        std::ofstream(spy) << "#!/bin/sh\necho \"$@\" >> " << ran.string() << "\nexec " << t
                           << " \"$@\"\n";
        fs::permissions(spy, fs::perms::owner_exec, fs::perm_options::add);
    }
    fs::create_symlink("/proc/self/environ", dir.path / "libenviron.so");
    std::ofstream(dir.path / "script.so") << "#!/bin/sh\n";
    symbol_config c;
    c.toolchain_prefix = (dir.path / "spy-").string();
    symbolizer sym(c);
    const std::vector<std::string> hostile = {"/dev/zero",
                                              "/proc/self/environ",
                                              "/proc/1/mem",
                                              "/sys/kernel/notes",
                                              (dir.path / "libenviron.so").string(),
                                              (dir.path / "script.so").string(),
                                              dir.path.string()};
    std::vector<symbolizer::site> sites{
        {demo_bin, "(anonymous namespace)::matrix_multiply", 4, own}};
    for (const auto& m : hostile)
        sites.push_back({m, "f", 1, own});
    const auto where = sym.resolve(sites);
    CHECK_FALSE(where[0].chain.empty());
    for (std::size_t i = 1; i < where.size(); ++i)
        CHECK(where[i].chain.empty());
    for (const auto& b : sym.binaries()) {
        INFO(b.module << ": " << b.error);
        CHECK(b.error.empty() == (b.module == demo_bin));
    }
    std::ifstream in(ran);
    std::stringstream text;
    text << in.rdbuf();
    CHECK_THAT(text.str(), Catch::Contains(demo_bin));
    for (const auto& m : hostile)
        CHECK_THAT(text.str(), !Catch::Contains(m));
    CHECK_THAT(text.str(), !Catch::Contains("/proc"));
}

TEST_CASE("ELF facts: segments, symbol table, debug link — a debug file's lost offsets laid out "
          "again — the function holding an address",
          "[collector][symbols]") {
    test_support::temp_dir dir;
    const auto facts = protocol::read_elf_facts(demo_bin);
    REQUIRE(facts);
    CHECK(facts->symtab);
    CHECK(facts->build_id == protocol::read_build_id(demo_bin));
    REQUIRE(facts->loads.size() >= 2);
    CHECK_FALSE(protocol::offsets_lost(*facts));

    // objcopy --only-keep-debug keeps addresses and sizes, not where the bytes were.
    const std::string debug = (dir.path / "demo.debug").string();
    REQUIRE(run_capture({"objcopy", "--only-keep-debug", demo_bin, debug}).code == 0);
    const auto debug_facts = protocol::read_elf_facts(debug);
    REQUIRE(debug_facts);
    CHECK(debug_facts->symtab);
    REQUIRE(protocol::offsets_lost(*debug_facts));
    const auto rebuilt = protocol::rebuild_offsets(debug_facts->loads);
    REQUIRE(rebuilt.size() == facts->loads.size());
    for (std::size_t i = 0; i < rebuilt.size(); ++i) {
        INFO("segment " << i);
        CHECK(rebuilt[i].vaddr == facts->loads[i].vaddr);
        CHECK(rebuilt[i].offset == facts->loads[i].offset);
    }
    // Every function's start, as perf would print it (a file offset), comes back.
    const auto symbols = elf_symbols::parse_readelf(run_capture({"readelf", "-sW", demo_bin}).out);
    const auto start = symbols.address_of("(anonymous namespace)::matrix_multiply");
    REQUIRE(start);
    std::uint64_t offset = 0;
    for (const auto& s : facts->loads)
        if (*start >= s.vaddr && *start - s.vaddr < s.filesz)
            offset = *start - s.vaddr + s.offset;
    CHECK(protocol::file_offset_to_vaddr(rebuilt, offset) == start);
    CHECK(protocol::file_offset_to_vaddr(facts->loads, offset) == start);
    const auto inside = symbols.at(*start + 5);
    REQUIRE(inside);
    CHECK(inside->name == "(anonymous namespace)::matrix_multiply");
    CHECK(inside->start == *start);

    // A stripped copy with a link to its debug file.
    const std::string stripped = (dir.path / "demo").string();
    REQUIRE(run_capture({"strip", "--strip-all", "-o", stripped, demo_bin}).code == 0);
    REQUIRE(run_capture({"objcopy", "--add-gnu-debuglink=" + debug, stripped}).code == 0);
    const auto stripped_facts = protocol::read_elf_facts(stripped);
    REQUIRE(stripped_facts);
    CHECK_FALSE(stripped_facts->symtab);
    CHECK(stripped_facts->debuglink == "demo.debug");
    CHECK_FALSE(protocol::read_elf_facts("/etc/passwd"));
}

TEST_CASE("elf_symbols: PLT stubs are named foo@plt where objdump puts them, from readelf's text "
          "kept without the relocations that name no function",
          "[collector][symbols]") {
    // The oracle: objdump's own PLT labels ("0000000000002040 <printf@plt>:").
    const auto dump =
        run_capture({"objdump", "-d", "--section=.plt", "--section=.plt.sec", demo_bin});
    REQUIRE(dump.code == 0);
    std::map<std::string, std::uint64_t> stubs;
    std::istringstream lines(dump.out);
    for (std::string line; std::getline(lines, line);)
        if (const auto at = line.find(" <"); at != std::string::npos && line.ends_with("@plt>:"))
            stubs[line.substr(at + 2, line.size() - at - 4)] =
                std::stoull(line.substr(0, at), nullptr, 16);
    REQUIRE(stubs.size() > 5);
    // readelf's text as the collector keeps it, streamed in pieces: the relocations that name
    // no function (the PIE's relative ones) left out, the PLT's kept.
    const auto full = run_capture({"readelf", "-SrsW", demo_bin}).out;
    REQUIRE(full.find("R_X86_64_RELATIVE") != std::string::npos);
    readelf_text kept;
    for (std::size_t at = 0; at < full.size(); at += 977)
        kept.append(std::string_view(full).substr(at, 977));
    const auto text = kept.finish();
    CHECK(text.find("R_X86_64_RELATIVE") == std::string::npos);
    CHECK(text.find("R_X86_64_JUMP_SLO") != std::string::npos);
    CHECK(text.size() < full.size());
    // Whatever the pieces (a blank line that ends a skipped section split between two), the
    // same text: every line but those of the sections left out.
    std::string expected;
    bool skipped = false;
    std::istringstream full_lines(full);
    for (std::string l; std::getline(full_lines, l);) {
        if (l.starts_with("Relocation section "))
            skipped = l.find("'.rela.plt'") == std::string::npos;
        else if (skipped && l.empty())
            skipped = false;
        if (!skipped)
            expected += l + "\n";
    }
    CHECK(text == expected);
    for (const std::size_t piece : {1, 2, 3, 4096}) {
        INFO("pieces of " << piece);
        readelf_text again;
        for (std::size_t at = 0; at < full.size(); at += piece)
            again.append(std::string_view(full).substr(at, piece));
        CHECK(again.finish() == expected);
    }
    const auto symbols = elf_symbols::parse_readelf(text);
    CHECK(symbols.size() == elf_symbols::parse_readelf(full).size());
    for (const auto& [raw, address] : stubs) {
        const auto name = perf_symbol_name(raw.substr(0, raw.size() - 4)) + "@plt";
        INFO(raw << " at 0x" << std::hex << address);
        CHECK(symbols.address_of(name) == address);
        const auto inside = symbols.at(address + 6); // an instruction into the stub
        REQUIRE(inside);
        CHECK(inside->name == name);
        CHECK(inside->start == address);
    }
    // Without the section headers and relocations (readelf -sW alone), as before: no stubs.
    const auto plain = elf_symbols::parse_readelf(run_capture({"readelf", "-sW", demo_bin}).out);
    CHECK_FALSE(plain.address_of(
        perf_symbol_name(stubs.begin()->first.substr(0, stubs.begin()->first.size() - 4)) +
        "@plt"));
}

TEST_CASE("elf_symbols::at: sizes, gaps, aliases, symbols without a size", "[collector][symbols]") {
    const auto s = elf_symbols::parse_readelf(
        "   1: 0000000000001000    16 FUNC    LOCAL  DEFAULT   14 small\n"
        "   2: 0000000000001020    32 FUNC    WEAK   DEFAULT   14 alias_weak\n"
        "   3: 0000000000001020    32 FUNC    GLOBAL DEFAULT   14 alias_global\n"
        "   4: 0000000000001100     0 FUNC    LOCAL  DEFAULT   14 no_size\n"
        "   5: 0000000000001200 0x20000 FUNC   GLOBAL DEFAULT   14 big\n");
    CHECK(s.at(0x1000)->name == "small");
    CHECK(s.at(0x100f)->name == "small");
    CHECK_FALSE(s.at(0x1010)); // between small's end and the next function
    CHECK_FALSE(s.at(0xfff));
    CHECK(s.at(0x1030)->name == "alias_global"); // perf shows the global alias
    CHECK(s.at(0x1150)->name == "no_size");      // up to the next symbol
    CHECK(s.at(0x211ff)->name == "big");
    CHECK_FALSE(s.at(0x21200));
}

TEST_CASE("elf_symbols: functions sharing perf's name get names of their own — the file where "
          "the files differ, else the parameters, and perf's name where neither differs",
          "[collector][symbols]") {
    const auto s = elf_symbols::parse_readelf(
        "Symbol table '.symtab' contains 12 entries:\n"
        "   1: 0000000000000000     0 FILE    LOCAL  DEFAULT  ABS a.c\n"
        "   2: 0000000000001000    16 FUNC    LOCAL  DEFAULT   14 work\n"
        "   3: 0000000000001010    16 FUNC    LOCAL  DEFAULT   14 _ZN2ns1fEi\n"
        "   4: 0000000000001020    16 FUNC    LOCAL  DEFAULT   14 _ZN2ns1fEd\n"
        "   5: 0000000000000000     0 FILE    LOCAL  DEFAULT  ABS b.c\n"
        "   6: 0000000000002000    16 FUNC    LOCAL  DEFAULT   14 work\n"
        "   7: 0000000000002010    16 FUNC    LOCAL  DEFAULT   14 _ZN3FooD1Ev\n"
        "   8: 0000000000002020    16 FUNC    LOCAL  DEFAULT   14 _ZN3FooD2Ev\n"
        "   9: 0000000000000000     0 FILE    LOCAL  DEFAULT  ABS \n"
        "  10: 0000000000003000    16 FUNC    GLOBAL DEFAULT   14 main\n"
        "  11: 0000000000003010    16 FUNC    GLOBAL DEFAULT   14 only\n"
        "  12: 0000000000003020    16 FUNC    GLOBAL DEFAULT   14 _ZdlPv\n"
        "  13: 0000000000003030    16 FUNC    GLOBAL DEFAULT   14 _ZdlPvm\n");
    CHECK(s.has_same_named());
    CHECK(s.at(0x1004)->name == "work (a.c)");
    CHECK(s.at(0x2004)->name == "work (b.c)");
    CHECK(s.address_of("work (b.c)") == 0x2000);
    CHECK(s.address_of("work") == 0x1000); // perf's name: the first listed
    const auto works = s.same_named("work");
    REQUIRE(works.size() == 2);
    CHECK(works[0].name == "work (a.c)");
    CHECK(works[1].start == 0x2000);
    // Overloads in one file: by their parameters.
    CHECK(s.at(0x1010)->name == "ns::f(int)");
    CHECK(s.at(0x1020)->name == "ns::f(double)");
    CHECK(s.same_named("ns::f").size() == 2);
    // A complete and a base destructor: one name, one file, one signature — as perf has them.
    CHECK(s.at(0x2010)->name == "Foo::~Foo");
    CHECK(s.at(0x2020)->name == "Foo::~Foo");
    CHECK(s.same_named("Foo::~Foo").empty());
    CHECK(s.same_named("main").empty());
    CHECK(s.at(0x3010)->name == "only");
    CHECK(s.at(0x3024)->name == "operator delete(void*)");
    // Only a function whose name is its alone places its module in a process.
    CHECK(s.alone("main") == 0x3000);
    CHECK_FALSE(s.alone("work"));
    CHECK_FALSE(s.alone("Foo::~Foo")); // shared, though not told apart
    CHECK_FALSE(s.alone("operator delete"));
    CHECK_FALSE(s.alone("nothing"));
    // Nothing shared: nothing to tell apart.
    CHECK_FALSE(elf_symbols::parse_readelf("   2: 0000000000001000    16 FUNC    LOCAL  DEFAULT   "
                                           "14 work\n")
                    .has_same_named());
}

TEST_CASE("locating symbols: build-id first, another build refused, debug link, perf's cache — "
          "what was tried and the fix",
          "[collector][symbols]") {
    test_support::temp_dir dir;
    const auto id = protocol::read_build_id(demo_bin);
    REQUIRE(id);
    const std::string module = "/opt/device/bin/app"; // where it ran, not on this machine
    symbol_config c;
    c.debug_dirs = {(dir.path / "none").string()};
    c.build_id_cache = (dir.path / "cache").string();

    // --binary by build-id, whatever its file name.
    c.binaries = {demo_bin};
    auto found = locate_symbols(c, module, *id);
    CHECK(found.origin == "--binary");
    CHECK(found.facts.symtab);
    CHECK(found.fix.empty());
    // The device ran another build: the same file is refused by name, and the fix is said.
    found = locate_symbols(c, "/opt/device/bin/perfwire-demo", std::string(40, 'a'));
    CHECK(found.path.empty());
    REQUIRE_FALSE(found.tried.empty());
    CHECK(found.tried[0].find("another build") != std::string::npos);
    CHECK(found.fix.find("--debug-dir") != std::string::npos);
    // What an agent names is read only where the owner said the device's files are: this
    // machine's file at the device's path only with --sysroot / (and then only the build the
    // agent reported); an imported recording uses it as it is. No "..", no build-id that is
    // not one, nothing outside the sysroot.
    symbol_config none;
    none.debug_dirs.clear();
    none.build_id_cache = c.build_id_cache;
    CHECK(locate_symbols(none, demo_bin, "").path.empty());
    const auto unsaid = locate_symbols(none, demo_bin, *id);
    CHECK(unsaid.path.empty());
    CHECK_THAT(unsaid.fix, Catch::Contains("--sysroot / when the device is this machine"));
    CHECK(locate_symbols(none, demo_bin, std::string(owner_recording)).origin ==
          "the device's path");
    {
        symbol_config here = none;
        here.sysroot = "/";
        CHECK(locate_symbols(here, demo_bin, *id).origin == "--sysroot");
        CHECK(locate_symbols(here, demo_bin, std::string(40, 'a')).path.empty());
        // Never a file the collector wrote from a peer's data: a copy of the very build in
        // the sessions folder is refused wherever it is found, --binary included.
        const auto sessions = dir.path / "sessions";
        std::filesystem::create_directories(sessions / "s1/chunks");
        const auto planted = (sessions / "s1/chunks/000001.txt").string();
        std::filesystem::copy_file(demo_bin, planted);
        here.peer_data_dirs = {sessions.string()};
        here.binaries = {planted};
        const auto refused = locate_symbols(here, planted, *id);
        CHECK(refused.path.empty());
        INFO(boost::json::serialize(boost::json::value_from(refused.tried)));
        CHECK(std::count_if(refused.tried.begin(), refused.tried.end(), [](const auto& t) {
                  return t.find("written by the collector from what peers sent") !=
                         std::string::npos;
              }) == 3); // as --binary (by build-id, by name) and under --sysroot /
        // Through a link from outside it too.
        std::filesystem::create_symlink(planted, dir.path / "innocent");
        std::string real;
        CHECK_THAT(refuse_to_open((dir.path / "innocent").string(), here.peer_data_dirs, real),
                   Catch::Contains("written by the collector"));
        CHECK(refuse_to_open(demo_bin, here.peer_data_dirs, real).empty());
        CHECK(real == std::filesystem::canonical(demo_bin).string());
        CHECK_THAT(refuse_to_open("/proc/self/environ", {}, real), Catch::Contains("kernel"));
    }
    CHECK(locate_symbols(none, "/usr/../" + demo_bin.substr(1), *id).path.empty());
    CHECK(locate_symbols(none, demo_bin, "zz").path.empty());
    {
        symbol_config rooted = none;
        rooted.sysroot = (dir.path / "jail").string();
        std::filesystem::create_directories(dir.path / "jail/bin");
        std::filesystem::create_symlink(demo_bin, dir.path / "jail/bin/app");
        const auto escaped = locate_symbols(rooted, "/bin/app", *id);
        CHECK(escaped.path.empty());
        REQUIRE_FALSE(escaped.tried.empty());
        CHECK_THAT(escaped.tried.front(), Catch::Contains("outside"));
    }
    // A hostile build-id is never made into a path.
    CHECK_FALSE(plausible_build_id("../../etc"));
    CHECK_FALSE(plausible_build_id("ABCDEF"));
    CHECK(plausible_build_id(*id));

    // A stripped copy under --sysroot with a .gnu_debuglink to a file beside it.
    c.binaries.clear();
    c.sysroot = (dir.path / "root").string();
    std::filesystem::create_directories(dir.path / "root/opt/device/bin");
    const std::string copy = (dir.path / "root/opt/device/bin/app").string();
    const std::string debug = (dir.path / "root/opt/device/bin/app.debug").string();
    REQUIRE(run_capture({"objcopy", "--only-keep-debug", demo_bin, debug}).code == 0);
    REQUIRE(run_capture({"strip", "--strip-all", "-o", copy, demo_bin}).code == 0);
    REQUIRE(run_capture({"objcopy", "--add-gnu-debuglink=" + debug, copy}).code == 0);
    found = locate_symbols(c, module, *id);
    CHECK(found.origin == ".gnu_debuglink");
    CHECK(found.path == std::filesystem::canonical(debug).string());
    // The segments are the stripped copy's, exact.
    CHECK(found.facts.loads.size() == protocol::read_elf_facts(copy)->loads.size());
    CHECK(found.facts.loads[1].offset == protocol::read_elf_facts(copy)->loads[1].offset);
    std::filesystem::remove(debug);

    // perf's build-id cache: a directory per build-id holding the binary as "elf".
    const auto entry = dir.path / "cache/.build-id" / id->substr(0, 2) / id->substr(2);
    std::filesystem::create_directories(entry);
    std::filesystem::copy_file(demo_bin, entry / "elf");
    found = locate_symbols(c, module, *id);
    CHECK(found.origin == "perf's build-id cache");
    CHECK(found.facts.symtab);
    // What was looked at before, in order.
    REQUIRE(found.tried.size() >= 2);
    CHECK(found.tried[0].find("stripped") != std::string::npos);
}

TEST_CASE("a debuginfod answer that arrives while a lookup is in flight is used at the next "
          "lookup, not taken for still pending",
          "[collector][symbols]") {
    const auto id = protocol::read_build_id(demo_bin);
    REQUIRE(id);
    const auto facts = protocol::read_elf_facts(demo_bin);
    REQUIRE(facts);
    const auto symbols = elf_symbols::parse_readelf(run_capture({"readelf", "-sW", demo_bin}).out);
    const auto start = symbols.address_of("(anonymous namespace)::matrix_multiply");
    REQUIRE(start);
    std::uint64_t offset = 0; // as perf prints it: a file offset in the module
    for (const auto& s : facts->loads)
        if (*start >= s.vaddr && *start - s.vaddr < s.filesz)
            offset = *start - s.vaddr + s.offset + 0x10;
    REQUIRE(offset != 0);

    test_support::temp_dir cache; // perf's build-id cache of this machine is not looked at
    symbol_config c;
    c.debug_dirs.clear();
    c.build_id_cache = cache.path.string();
    symbolizer sym(c);
    // A debuginfod that answers while the first lookup is between asking and storing what it
    // was told: the collector's fetch thread calls refresh() then, as here.
    std::atomic<bool> arrived = false;
    std::atomic<int> asked = 0;
    std::promise<void> first_asked, answered;
    auto go = answered.get_future().share();
    std::atomic<bool> other_id = false; // (Catch's CHECK is for the test's own thread)
    sym.use_debuginfod([&](const std::string& build_id, std::string& why, bool& pending) {
        other_id = other_id || build_id != *id;
        if (asked++ == 0) {
            first_asked.set_value();
            go.wait();
            why = "asked, waiting";
            pending = true; // it looked before the answer was here
            return std::optional<std::string>();
        }
        pending = !arrived;
        return arrived ? std::optional<std::string>(demo_bin) : std::nullopt;
    });
    const std::string module = "/opt/device/perfwire-demo";
    bool named_first = true;
    std::thread first([&] { named_first = sym.name_frame(module, *id, offset).has_value(); });
    first_asked.get_future().wait();
    arrived = true;
    sym.refresh();
    answered.set_value();
    first.join();
    CHECK_FALSE(named_first);
    CHECK_FALSE(other_id);
    // At once, not two seconds later: the answer came after that lookup asked.
    const auto named = sym.name_frame(module, *id, offset);
    REQUIRE(named);
    CHECK(named->symbol == "(anonymous namespace)::matrix_multiply");
    CHECK(named->offset == 0x10);
    CHECK(asked == 2);
}

TEST_CASE("frames perf could not name are named at the collector — a module named here whole "
          "when its device symbols are poor",
          "[collector][symbols]") {
    // The address of matrix_multiply+0x10, as perf prints it: a file offset in the module.
    const auto facts = protocol::read_elf_facts(demo_bin);
    REQUIRE(facts);
    const auto symbols = elf_symbols::parse_readelf(run_capture({"readelf", "-sW", demo_bin}).out);
    const auto start = symbols.address_of("(anonymous namespace)::matrix_multiply");
    const auto caller = symbols.address_of("(anonymous namespace)::matrix_worker");
    REQUIRE(start);
    REQUIRE(caller);
    const auto offset_of = [&](std::uint64_t vaddr) {
        for (const auto& s : facts->loads)
            if (vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
                return vaddr - s.vaddr + s.offset;
        return std::uint64_t{0};
    };
    const std::string module = "/opt/device/perfwire-demo";
    std::ostringstream text;
    text << std::hex;
    for (int i = 0; i < 10; ++i)
        text << "app 1/1 1." << i << ": 1000 cpu-clock:\n\t" << offset_of(*start + 0x10)
             << " [unknown] (" << module << ")\n\t" << offset_of(*caller + 0x20)
             << " exported_fn+0x1234 (" << module << ")\n\n";

    symbol_config c;
    c.binaries = {demo_bin}; // by file name: the import reported no build-id
    c.debug_dirs.clear();
    symbolizer sym(c);
    const auto names = [&](symbolizer& s) {
        session_model m(&s);
        m.ingest(false, text.str());
        std::vector<std::string> out;
        for (std::uint32_t n = 1; n < m.prof.node_count(); ++n)
            out.emplace_back(m.prof.symbol(m.prof.node_frame(n)));
        return out;
    };
    // The leaf perf could not name is named; the caller keeps perf's name.
    CHECK(names(sym) ==
          std::vector<std::string>{"exported_fn", "(anonymous namespace)::matrix_multiply"});
    // The leaf's offset into the function is kept for source lines, the caller's (its call's
    // return address) for call-site lines: the root's site, the caller's, the leaf's.
    {
        session_model m(&sym);
        m.ingest(false, text.str());
        REQUIRE(m.prof.site_count() == 3);
        CHECK(m.prof.site_offset(2) == 0x10);
        CHECK(m.prof.site_parent(2) == 1);
        CHECK(m.prof.site_offset(1) == 0x1234);
        CHECK(m.prof.symbol(m.prof.site_frame(1)) == "exported_fn");
    }
    // Named here whole: the caller too.
    c.resymbolize = {module};
    sym.configure(c);
    CHECK(names(sym) == std::vector<std::string>{"(anonymous namespace)::matrix_worker",
                                                 "(anonymous namespace)::matrix_multiply"});
    // Without symbols for it: as perf printed them.
    symbolizer none;
    CHECK(names(none) == std::vector<std::string>{"exported_fn", "[unknown]"});
}

TEST_CASE("debuginfod: a server that never answers holds the queue for the stall limit only, and "
          "downloads an hour are limited",
          "[collector][symbols][debuginfod]") {
    REQUIRE(debuginfod_fetcher::available()); // (libdebuginfod-dev is in the install script)
    test_support::temp_dir dir;
    ::setenv("DEBUGINFOD_CACHE_PATH", (dir.path / "cache").c_str(), 1);
    // A server that takes connections (the kernel's queue) and never says a word.
    const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(silent >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(silent, 16) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    const std::string url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
    ::setenv("DEBUGINFOD_URLS", url.c_str(), 1); // (libdebuginfod reads it itself)

    debuginfod_limits limits;
    limits.stall = std::chrono::seconds(1);
    limits.per_hour = 2;
    std::atomic<int> arrivals{0}, found{0};
    debuginfod_fetcher f(
        url,
        [&](bool with_file) {
            ++arrivals;
            found += with_file;
        },
        limits);
    const std::string a(40, 'a'), b(40, 'b'), c(40, 'c');
    std::string why;
    bool pending = false;
    CHECK_FALSE(f.lookup(a, why, pending));
    CHECK(pending);
    CHECK_FALSE(f.lookup(b, why, pending));
    CHECK(pending);
    // A third build-id within the hour is refused at once, saying why.
    CHECK_FALSE(f.lookup(c, why, pending));
    CHECK_FALSE(pending);
    CHECK_THAT(why, Catch::Contains("2 debuginfod downloads in the last hour"));
    // Each of the first two is given up after a second of silence, the second after the first.
    for (const auto& id : {a, b}) {
        for (int i = 0; i < 300; ++i) {
            (void)f.lookup(id, why, pending);
            if (!pending)
                break;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        CHECK_FALSE(pending);
        CHECK_THAT(why, Catch::Contains("the server sent nothing for 1 s"));
    }
    // Answered, if with nothing: the symbols are told to look again (and then say why).
    for (int i = 0; i < 100 && arrivals == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    f.stop();
    ::close(silent);
    ::unsetenv("DEBUGINFOD_URLS");
    CHECK(arrivals >= 1);
    CHECK(found == 0);
}

TEST_CASE("kernel tables: one per distinct kernel, shared by its sessions, freed with the last, "
          "about 12 bytes a symbol besides its name",
          "[collector][symbols][memory]") {
    std::string text;
    std::size_t name_bytes = 0;
    for (int i = 0; i < 100000; ++i) {
        char line[64];
        const int n = std::snprintf(line, sizeof line, "ffffffff8%07x kernel_fn_%d\n", i * 16, i);
        text.append(line, static_cast<std::size_t>(n));
        name_bytes += std::string("kernel_fn_" + std::to_string(i)).size();
    }
    kernel_tables tables;
    auto a = tables.get(text);
    auto b = tables.get(text);
    CHECK(a == b); // one table for two sessions of one kernel
    REQUIRE(a->size() == 100000);
    CHECK(a->at(0xffffffff80000015)->name == "kernel_fn_1");
    CHECK(a->at(0xffffffff80000010)->start == 0xffffffff80000010);
    CHECK(a->memory_bytes() < name_bytes + 100000 * 13);
    CHECK(tables.memory_bytes() == a->memory_bytes());
    // What a later session's folder keeps parses to the same table.
    const auto again = kernel_symbols::parse(a->text());
    REQUIRE(again.size() == a->size());
    CHECK(again.at(0xffffffff80123457)->name == a->at(0xffffffff80123457)->name);
    // A session reloaded from its folder (the table's text, not the agent's) shares it, as does
    // an agent that listed the same symbols in another order.
    CHECK(tables.get(a->text()) == a);
    std::string reordered = "junk line\n";
    for (std::size_t at = text.size(); at > 0;) {
        const auto from = text.rfind('\n', at - 2);
        const auto begin = from == std::string::npos ? 0 : from + 1;
        reordered.append(text, begin, at - begin);
        at = begin;
    }
    CHECK(tables.get(reordered) == a);
    CHECK(tables.memory_bytes() == a->memory_bytes());
    auto other = tables.get(text + "ffffffff90000000 another_kernel\n");
    CHECK(other != a);
    CHECK(tables.memory_bytes() == a->memory_bytes() + other->memory_bytes());
    a.reset();
    CHECK(tables.memory_bytes() > other->memory_bytes()); // b still holds it
    b.reset();
    other.reset();
    CHECK(tables.memory_bytes() == 0);

    // Within their share of the memory budget: past it a new table is not made.
    auto first = tables.get(text);
    tables.set_limit(first->memory_bytes() * 3 / 2);
    CHECK(tables.get(text) == first); // one held already costs nothing more
    CHECK_FALSE(tables.get(text + "ffffffff90000000 another_kernel\n"));
    first.reset();
    CHECK(tables.get(text + "ffffffff90000000 another_kernel\n"));
}

TEST_CASE("the device's build-ids: from metrics frames and from notes in the text, bounded in "
          "count and counted in the model's memory",
          "[symbols]") {
    session_model m;
    const auto before = m.memory_bytes();
    // A note in the text names the build of a module before its samples.
    const std::string note =
        std::string(protocol::metrics_note) +
        R"({"type":"binaries","ts":1,"pid":7,"binaries":[{"path":"/usr/bin/app","build_id":"00aa11bb"}]})";
    REQUIRE(m.ingest(
        false, note + "\napp 7/7 1.000: 1000 cpu-clock:\n\t1139 main+0x10 (/usr/bin/app)\n\n"));
    CHECK(m.device_build_ids.at("/usr/bin/app") == "00aa11bb");
    CHECK(m.prof.sample_count() == 1);
    CHECK(m.parser.stats().comments == 1);
    // An agent naming ever new files: the table stops growing, and the model counts it.
    for (int batch = 0; batch < 50; ++batch) {
        protocol::binaries_metrics b;
        for (int i = 0; i < 100; ++i)
            b.binaries.push_back(
                {"/lib/x" + std::to_string(batch * 100 + i) + std::string(200, 'y'), "ab"});
        m.note_metrics(protocol::serialize(protocol::health_metrics{b}));
    }
    CHECK(m.device_build_ids.size() == session_model::max_device_binaries);
    CHECK(m.memory_bytes() >= before + session_model::max_device_binaries * 200);
    // A known path still takes a new build-id.
    m.note_metrics(
        R"({"type":"binaries","ts":2,"pid":7,"binaries":[{"path":"/usr/bin/app","build_id":"ccdd"}]})");
    CHECK(m.device_build_ids.at("/usr/bin/app") == "ccdd");
}
