// fleet: one collector serving many agents and browsers at once, over the real wire.
//
// Starts the real collector on loopback (agents enroll with its token), then on one thread of
// this process:
//   - `readers` browsers on GET /api/stream, connected first, each following the targets and
//     the sessions' data versions as the UI does;
//   - `agents` simulated agents, all connecting within the first second: each says hello with
//     the enrollment token and sends a zstd chunk of real perf script text (the captures in
//     test/collector/fixtures, rewritten: fresh thread ids, shifted times, suffixed function
//     names) once a second, `rate` samples in each;
// and on another thread a view client asking each live session's function table in turn,
// every 100 ms.
//
// Every 10 s it prints the collector's CPU over the interval, its RSS and peak RSS. At the end:
// offered and counted samples (every sample sent must be counted), disk per agent-minute
// (the session folders' size), view p50/p99, the delay from an agent's first chunk to each
// browser's first data_version for its session (p50/max over every browser and session),
// browsers dropped, and (browser, session) pairs whose browser was never told the session's
// final count once the agents stopped (a live view that stopped updating).
//
// Usage: fleet [--agents N] [--seconds S] [--readers R] [--rate SAMPLES] [--check]
//              [--sweep] [-- COLLECTOR ARGS...]
//   --sweep  runs N = 1, 20, 50, 200 one after another and prints one row each
//   --check  exits 1 unless every sample is counted, no browser was dropped, every session
//            kept updating to the end, every agent's session was told to every browser and
//            the sessions held no more than the memory budget at any second (what the test
//            command asserts with a short run, folding under a small budget; no timing is
//            checked)
#include "collector/model/profile.hpp"
#include "collector/parse/perf_script.hpp"
#include "protocol/compression.hpp"
#include "protocol/frame.hpp"
#include "support/http_client.hpp"
#include "support/proc_status.hpp"

#include "capture.hpp"
#include "support.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unistd.h>

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;
using asio::ip::tcp;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

void rethrow(std::exception_ptr e) {
    if (e)
        std::rethrow_exception(e);
}

double ms_between(clock_type::time_point a, clock_type::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

double percentile(std::vector<double> v, double p) {
    if (v.empty())
        return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size())))];
}

std::uintmax_t folder_bytes(const fs::path& p) {
    std::uintmax_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::end(it);
         it.increment(ec))
        if (it->is_regular_file(ec))
            n += it->file_size(ec);
    return n;
}

// A chunk as an agent sends it, and the samples in it.
struct chunk {
    std::string frame;
    std::uint64_t samples = 0;
};

// `variants` chunks of about `rate` samples each, from rewritten real captures.
std::vector<chunk> make_chunks(int variants, std::uint64_t rate) {
    const std::string base = bench::base_capture();
    std::vector<chunk> out;
    int copy = 0;
    for (int v = 0; v < variants; ++v) {
        std::string text;
        collector::profile prof;
        collector::script_parser parser(prof);
        std::uint64_t samples = 0;
        while (samples < rate) {
            const auto piece = bench::rewrite(base, copy++);
            parser.feed(piece);
            parser.finish();
            samples = parser.stats().samples;
            text += piece;
        }
        out.push_back({protocol::encode_frame(protocol::frame_flag::zstd, protocol::compress(text)),
                       samples});
    }
    return out;
}

struct shared_state {
    std::atomic<bool> agents_stop{false}; // the agents stop sending (the run's end)
    std::atomic<bool> stop{false};        // the browsers stop reading
    std::atomic<int> connected{0}, failed{0}, ended{0};
    std::atomic<std::uint64_t> offered{0}; // samples in chunks written
    // agent hostname -> when its first chunk was written (I/O thread only)
    std::map<std::string, clock_type::time_point> first_chunk;
};

struct reader_state {
    bool dropped = false;
    bool opened = false;
    std::map<std::string, std::string> host_of;                  // session id -> hostname
    std::map<std::string, clock_type::time_point> first_version; // session id -> when
    std::map<std::string, std::uint64_t> told;                   // session id -> samples said
    std::uint64_t bytes = 0;
};

asio::awaitable<void> agent(tcp::endpoint ep, const std::vector<chunk>& chunks, int index,
                            std::string token, clock_type::duration delay, shared_state& s) {
    struct ending {
        shared_state& s;
        ~ending() { ++s.ended; }
    } counted_as_ended{s};
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer t(ex, delay);
    co_await t.async_wait(use_nothrow);
    auto sock = std::make_shared<tcp::socket>(ex);
    auto [ec] = co_await sock->async_connect(ep, use_nothrow);
    const std::string host = "board-" + std::to_string(index);
    const std::string hello =
        protocol::encode_frame(protocol::frame_flag::response,
                               R"({"type":"hello","version":1,"agent":"perfwire","hostname":")" +
                                   host + R"(","enrollment":")" + token + R"("})");
    if (!ec)
        std::tie(ec, std::ignore) =
            co_await asio::async_write(*sock, asio::buffer(hello), use_nothrow);
    if (ec) {
        ++s.failed;
        co_return;
    }
    ++s.connected;
    // Reads and drops what the collector sends (it sends no commands here).
    asio::co_spawn(
        ex,
        [sock]() -> asio::awaitable<void> {
            char buf[4096];
            for (;;) {
                auto [rec, n] = co_await sock->async_read_some(asio::buffer(buf), use_nothrow);
                if (rec)
                    co_return;
            }
        },
        asio::detached);
    for (std::size_t k = 0; !s.agents_stop; ++k) {
        const auto& c = chunks[(static_cast<std::size_t>(index) + k) % chunks.size()];
        auto [wec, n] = co_await asio::async_write(*sock, asio::buffer(c.frame), use_nothrow);
        if (wec) {
            ++s.failed;
            break;
        }
        s.offered += c.samples;
        s.first_chunk.try_emplace(host, clock_type::now());
        t.expires_after(1s);
        co_await t.async_wait(use_nothrow);
    }
    boost::system::error_code ignored;
    sock->shutdown(tcp::socket::shutdown_both, ignored);
    sock->close(ignored);
}

void on_event(reader_state& r, std::string_view kind, std::string_view data) {
    if (kind == "targets" || kind == "targets_changed") {
        const auto v = json::parse(data);
        const auto& list = kind == "targets" ? v.as_array() : v.at("targets").as_array();
        for (const auto& t : list)
            if (const auto* sid = t.as_object().if_contains("session_id"); sid && sid->is_string())
                r.host_of[std::string(sid->as_string())] =
                    std::string(t.at("hostname").as_string());
    } else if (kind == "data_version") {
        const auto v = json::parse(data);
        const std::string id(v.at("session_id").as_string());
        const auto now = clock_type::now();
        r.first_version.try_emplace(id, now);
        r.told[id] = v.at("samples").to_number<std::uint64_t>();
    }
}

asio::awaitable<void> reader(tcp::endpoint ep, reader_state& r, shared_state& s) {
    auto ex = co_await asio::this_coro::executor;
    tcp::socket sock(ex);
    auto [ec] = co_await sock.async_connect(ep, use_nothrow);
    const std::string get = "GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    if (!ec)
        std::tie(ec, std::ignore) =
            co_await asio::async_write(sock, asio::buffer(get), use_nothrow);
    if (ec) {
        r.dropped = true;
        co_return;
    }
    std::string buf;
    std::size_t at = std::string::npos; // where the next event starts, once past the header
    char tmp[65536];
    while (!s.stop) {
        auto [rec, n] = co_await sock.async_read_some(asio::buffer(tmp), use_nothrow);
        if (rec) {
            r.dropped = !s.stop;
            co_return;
        }
        r.bytes += n;
        buf.append(tmp, n);
        if (at == std::string::npos) {
            const auto h = buf.find("\r\n\r\n");
            if (h == std::string::npos)
                continue;
            at = h + 4;
            r.opened = true;
        }
        for (auto end = buf.find("\n\n", at); end != std::string::npos;
             at = end + 2, end = buf.find("\n\n", at)) {
            std::string_view block(buf.data() + at, end - at);
            std::string_view kind, data;
            while (!block.empty()) {
                const auto nl = block.find('\n');
                const auto line = block.substr(0, nl);
                if (line.rfind("event: ", 0) == 0)
                    kind = line.substr(7);
                else if (line.rfind("data: ", 0) == 0)
                    data = line.substr(6);
                block = nl == std::string_view::npos ? std::string_view() : block.substr(nl + 1);
            }
            if (!kind.empty())
                on_event(r, kind, data);
        }
        buf.erase(0, at);
        at = 0;
    }
    boost::system::error_code ignored;
    sock.close(ignored);
}

struct run_result {
    int agents = 0;
    double offered_per_s = 0;
    std::uint64_t offered = 0, counted = 0;
    double cpu_pct = 0;
    long rss_kb = 0, hwm_kb = 0;
    double disk_per_agent_minute = 0;
    double view_p50 = 0, view_p99 = 0;
    std::size_t views = 0;
    double first_p50 = 0, first_max = 0;
    std::size_t first_missing = 0; // (browser, session) pairs never told
    int dropped = 0;
    // (browser, session) pairs whose browser was never told the session's final count (once
    // the agents stopped, within a minute of the collector counting every sample)
    std::size_t stale = 0;
    int failed = 0;
    std::uint64_t budget = 0, peak_sessions = 0, folded = 0; // as /api/status said each second
};

std::vector<std::string> live_sessions(std::uint16_t http) {
    std::vector<std::string> ids;
    const auto r = test_support::http_call(http, "GET", "/api/sessions?limit=1000");
    if (r.status != 200)
        return ids;
    const auto list = json::parse(r.body);
    for (const auto& s : list.as_array())
        if (s.at("live").as_bool())
            ids.emplace_back(s.at("id").as_string());
    return ids;
}

// Asks `done` every 100 ms until it says yes or a minute has passed (a bound for a collector
// that fails, never the expected wait).
template <class Done>
void within_a_minute(Done done) {
    for (int i = 0; i < 600 && !done(); ++i)
        std::this_thread::sleep_for(100ms);
}

// Each session's samples as the collector counts them.
std::map<std::string, std::uint64_t> session_samples(std::uint16_t http) {
    std::map<std::string, std::uint64_t> out;
    const auto r = test_support::http_call(http, "GET", "/api/sessions?limit=1000");
    if (r.status != 200)
        return out;
    const auto list = json::parse(r.body);
    for (const auto& s : list.as_array())
        if (const auto* v = s.as_object().if_contains("samples"))
            out[std::string(s.at("id").as_string())] = v->to_number<std::uint64_t>();
    return out;
}

// The (browser, session) pairs, of sessions a browser heard of, whose final count it was not
// told (on the I/O thread, where the browsers' state lives).
std::size_t untold(const std::vector<reader_state>& rs,
                   const std::map<std::string, std::uint64_t>& final_samples) {
    std::size_t n = 0;
    for (const auto& r : rs)
        for (const auto& [sid, heard] : r.told)
            if (const auto it = final_samples.find(sid); it != final_samples.end())
                n += heard < it->second;
    return n;
}

std::uint64_t counted_samples(std::uint16_t http) {
    std::uint64_t n = 0;
    for (const auto& [id, samples] : session_samples(http))
        n += samples;
    return n;
}

std::optional<run_result> run(int agents, int seconds, int readers, std::uint64_t rate,
                              const std::vector<std::string>& collector_args, bool verbose) {
    const fs::path work =
        fs::temp_directory_path() /
        ("perfwire-fleet-" + std::to_string(::getpid()) + "-" + std::to_string(agents));
    fs::remove_all(work);
    fs::create_directories(work);
    std::vector<std::string> args{"--agent-auth", "token"};
    args.insert(args.end(), collector_args.begin(), collector_args.end());
    auto coll = bench::start_collector(PERFWIRE_COLLECTOR_BIN, work / "sessions", args);
    if (!coll)
        return std::nullopt;
    std::string token;
    std::ifstream(work / "sessions" / ".agent-token") >> token;
    const int pid = coll->proc->pid();

    const auto chunks = make_chunks(8, rate);
    shared_state s;
    std::vector<reader_state> rs(static_cast<std::size_t>(readers));
    asio::io_context io;
    const tcp::endpoint http_ep(asio::ip::make_address("127.0.0.1"), coll->http_port);
    const tcp::endpoint agent_ep(asio::ip::make_address("127.0.0.1"), coll->agent_port);
    for (auto& r : rs)
        asio::co_spawn(io, reader(http_ep, r, s), rethrow);
    // Browsers first: run until each has its header.
    for (int i = 0; i < 200 && !std::all_of(rs.begin(), rs.end(),
                                            [](auto& r) { return r.opened || r.dropped; });
         ++i)
        io.run_for(10ms);
    const auto started = clock_type::now();
    for (int i = 0; i < agents; ++i)
        asio::co_spawn(io,
                       agent(agent_ep, chunks, i, token,
                             std::chrono::microseconds(1'000'000LL * i / std::max(agents, 1)), s),
                       rethrow);
    std::thread loop([&] {
        auto work_guard = asio::make_work_guard(io);
        while (!s.stop)
            io.run_for(100ms);
        work_guard.reset();
        io.run_for(2s);
    });

    // The view client: each live session's function table in turn.
    std::vector<double> view_ms;
    std::thread viewer([&] {
        std::vector<std::string> ids;
        std::size_t next = 0;
        auto refreshed = clock_type::time_point{};
        while (!s.agents_stop) {
            if (clock_type::now() - refreshed > 5s) {
                ids = live_sessions(coll->http_port);
                refreshed = clock_type::now();
            }
            if (!ids.empty()) {
                const auto& id = ids[next++ % ids.size()];
                const auto t0 = clock_type::now();
                const auto r = test_support::http_call(
                    coll->http_port, "GET", "/api/sessions/" + id + "/functions?limit=200");
                if (r.status == 200)
                    view_ms.push_back(ms_between(t0, clock_type::now()));
            }
            std::this_thread::sleep_for(100ms);
        }
    });

    run_result out;
    out.agents = agents;
    double cpu_last = bench::cpu_seconds(pid);
    auto t_last = clock_type::now();
    const double cpu_start = cpu_last;
    const auto t_start = t_last;
    for (int tick = 1; tick <= seconds; ++tick) {
        std::this_thread::sleep_until(started + std::chrono::seconds(tick));
        // What the sessions hold against the budget, every second.
        json::value memory;
        if (const auto st = test_support::http_call(coll->http_port, "GET", "/api/status");
            st.status == 200) {
            const auto v = json::parse(st.body);
            memory = v.at("memory");
            out.budget = memory.at("budget").to_number<std::uint64_t>();
            out.peak_sessions =
                std::max(out.peak_sessions, memory.at("sessions").to_number<std::uint64_t>());
            out.folded = memory.at("folded_samples").to_number<std::uint64_t>();
        }
        if (verbose && tick % 10 == 0) {
            const double cpu = bench::cpu_seconds(pid);
            const auto now = clock_type::now();
            std::printf("  %3d s: CPU %5.1f %%, RSS %6.1f MiB, peak %6.1f MiB, %d agents, "
                        "%.0f samples/s offered\n",
                        tick, 100 * (cpu - cpu_last) / (ms_between(t_last, now) / 1000),
                        test_support::status_kb(pid, "VmRSS:") / 1024.0,
                        test_support::status_kb(pid, "VmHWM:") / 1024.0, s.connected.load(),
                        static_cast<double>(s.offered.load()) / (ms_between(started, now) / 1000));
            if (memory.is_object()) {
                const auto& m = memory;
                std::printf("         sessions hold %.1f MiB of a %.0f MiB budget (%.1f MiB each "
                            "at most), %llu samples folded\n",
                            m.at("sessions").to_number<double>() / 1048576,
                            m.at("budget").to_number<double>() / 1048576,
                            m.at("allowance").to_number<double>() / 1048576,
                            static_cast<unsigned long long>(
                                m.at("folded_samples").to_number<std::uint64_t>()));
            }
            std::fflush(stdout);
            cpu_last = cpu;
            t_last = now;
        }
    }
    const auto t_end = clock_type::now();
    out.cpu_pct = 100 * (bench::cpu_seconds(pid) - cpu_start) / (ms_between(t_start, t_end) / 1000);
    out.rss_kb = test_support::status_kb(pid, "VmRSS:");
    out.hwm_kb = test_support::status_kb(pid, "VmHWM:");
    s.agents_stop = true;
    viewer.join();
    // The agents end after the chunk they are writing (the waits below are bounds for a
    // collector that fails; each ends at the event it waits for).
    within_a_minute([&] { return s.ended >= agents; });
    out.offered = s.offered.load();
    out.offered_per_s = static_cast<double>(out.offered) / (ms_between(started, t_end) / 1000);
    // Every sample sent is counted once the collector has read what is on its sockets.
    within_a_minute(
        [&] { return (out.counted = counted_samples(coll->http_port)) >= out.offered; });
    // Then every browser is told each session's final count, as live views are: however long
    // the collector took to parse (a sanitizer build on a loaded machine lags by seconds), a
    // view that stopped updating before the end never is.
    const auto final_samples = session_samples(coll->http_port);
    within_a_minute([&] {
        std::promise<std::size_t> asked;
        auto answer = asked.get_future();
        asio::post(io, [&] { asked.set_value(untold(rs, final_samples)); });
        return (out.stale = answer.get()) == 0;
    });
    s.stop = true;
    loop.join();
    out.failed = s.failed.load();
    const double minutes = ms_between(started, t_end) / 60000;
    out.disk_per_agent_minute =
        static_cast<double>(folder_bytes(work / "sessions")) / (agents * minutes);
    out.view_p50 = percentile(view_ms, 0.50);
    out.view_p99 = percentile(view_ms, 0.99);
    out.views = view_ms.size();
    std::vector<double> first;
    for (const auto& r : rs) {
        out.dropped += r.dropped;
        std::size_t told = 0;
        for (const auto& [sid, host] : r.host_of) {
            const auto sent = s.first_chunk.find(host);
            const auto heard = r.first_version.find(sid);
            if (sent == s.first_chunk.end() || heard == r.first_version.end())
                continue;
            ++told;
            first.push_back(ms_between(sent->second, heard->second));
        }
        out.first_missing += s.first_chunk.size() - std::min(told, s.first_chunk.size());
    }
    out.first_p50 = percentile(first, 0.50);
    out.first_max = first.empty() ? 0 : *std::max_element(first.begin(), first.end());
    coll.reset();
    fs::remove_all(work);
    return out;
}

void print_header() {
    std::printf("%6s %12s %6s %9s %9s %9s %10s %15s %17s %7s %6s %8s\n", "agents", "samples/s",
                "CPU%", "RSS MiB", "peak MiB", "KB/ag-min", "counted", "view p50/p99 ms",
                "first told p50/max", "dropped", "stale", "failed");
}

void print_row(const run_result& r) {
    char views[32], first[32];
    std::snprintf(views, sizeof views, "%.1f / %.1f", r.view_p50, r.view_p99);
    std::snprintf(first, sizeof first, "%.0f / %.0f ms", r.first_p50, r.first_max);
    std::printf("%6d %12.0f %6.1f %9.1f %9.1f %9.0f %9.4f%% %15s %17s %7d %6zu %8d\n", r.agents,
                r.offered_per_s, r.cpu_pct, r.rss_kb / 1024.0, r.hwm_kb / 1024.0,
                r.disk_per_agent_minute / 1000,
                100.0 * static_cast<double>(r.counted) /
                    static_cast<double>(std::max<std::uint64_t>(r.offered, 1)),
                views, first, r.dropped, r.stale, r.failed);
    std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
    int agents = 50, seconds = 60, readers = 20;
    std::uint64_t rate = 2800;
    bool check = false, sweep = false;
    std::vector<std::string> collector_args;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
        if (a == "--agents")
            agents = std::max(1, value());
        else if (a == "--seconds")
            seconds = std::max(5, value());
        else if (a == "--readers")
            readers = std::max(0, value());
        else if (a == "--rate")
            rate = static_cast<std::uint64_t>(std::max(1, value()));
        else if (a == "--check")
            check = true;
        else if (a == "--sweep")
            sweep = true;
        else if (a == "--") {
            collector_args.assign(argv + i + 1, argv + argc);
            break;
        } else {
            std::fprintf(stderr, "usage: fleet [--agents N] [--seconds S] [--readers R] "
                                 "[--rate SAMPLES] [--check] [--sweep] [-- COLLECTOR ARGS]\n");
            return 2;
        }
    }
    std::printf("fleet: %d s each, %d browsers, %llu samples a second per agent (one chunk a "
                "second)\n",
                seconds, readers, static_cast<unsigned long long>(rate));
    std::vector<int> sizes = sweep ? std::vector<int>{1, 20, 50, 200} : std::vector<int>{agents};
    bool ok = true;
    std::vector<run_result> rows;
    for (const int n : sizes) {
        std::printf("%d agents:\n", n);
        auto r = run(n, seconds, readers, rate, collector_args, true);
        if (!r)
            return 1;
        rows.push_back(*r);
        ok = ok && r->counted == r->offered && r->dropped == 0 && r->stale == 0 &&
             r->first_missing == 0 && r->failed == 0 && r->peak_sessions <= r->budget;
        std::printf("  the sessions held at most %.1f MiB of the %.0f MiB budget; %llu samples "
                    "folded\n",
                    static_cast<double>(r->peak_sessions) / 1048576,
                    static_cast<double>(r->budget) / 1048576,
                    static_cast<unsigned long long>(r->folded));
        if (r->counted != r->offered)
            std::printf("  counted %llu of %llu samples\n",
                        static_cast<unsigned long long>(r->counted),
                        static_cast<unsigned long long>(r->offered));
        if (r->first_missing)
            std::printf("  %zu (browser, session) pairs never told\n", r->first_missing);
    }
    print_header();
    for (const auto& r : rows)
        print_row(r);
    if (check && !ok) {
        std::printf("FAILED: not every sample counted, a browser dropped, a session not "
                    "updating, an agent failed, or the sessions over the memory budget\n");
        return 1;
    }
    return 0;
}
