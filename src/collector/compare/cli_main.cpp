// perfwire: what a CI job runs. `perfwire record` asks a collector's agent for a session and
// prints its id; `perfwire compare BASELINE CANDIDATE` compares recordings (files, session
// folders, a collector's sessions) and answers with a verdict a pipeline acts on: exit 0 (pass),
// 1 (a regression), 2 (could not compare: too few samples for the threshold, a run that cannot be
// read, usage).
#include "collector/compare/client.hpp"
#include "collector/compare/compare.hpp"
#include "collector/compare/sources.hpp"
#include "collector/http/target.hpp"
#include "collector/store/session_store.hpp"
#include "collector/symbols/symbolizer.hpp"

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace po = boost::program_options;
namespace cmp = collector::compare;

namespace {

constexpr int pass = 0, regression = 1, cannot = 2;

const char* const usage = R"(usage: perfwire compare [options] BASELINE CANDIDATE
       perfwire record --url URL --agent NAME (--pid PID | --process NAME | --system)
                       --seconds N [options]

compare: two sides function by function, each a recording or several joined by commas and
pooled (more runs, more power) — a saved session folder (the collector's --sessions-dir has
one per session), a perf script text file, a perf.data file (read with perf script), or with
--url the id of a session the collector holds — or with --url a selection of its fleet store:
fleet:KEY=VALUE&… with devices=a,b build=BUILD-ID from=/to= (seconds since the epoch or a UTC
date, 2026-11-30T12:00) last= (3600, 90m, 24h, 7d) event= function= (quote it for the shell).

A function whose share of the time grew by more than --threshold (% of what it was) and by
more than the noise band is a regression. The band is the one the UI shows (two shares that
sampling alone makes differ), widened for the number of functions checked so that a whole
report's false alarms stay within 100 - --confidence %.

Exit status: 0 pass, 1 a regression, 2 could not compare (said why: too few samples for the
threshold asked, with the number needed; a run that cannot be read; a bad option).

)";

std::vector<std::string> split_on(const std::string& list, char sep) {
    std::vector<std::string> out;
    std::size_t from = 0;
    for (;;) {
        const auto comma = list.find(sep, from);
        const auto item = list.substr(from, comma - from);
        if (!item.empty())
            out.push_back(item);
        if (comma == std::string::npos)
            return out;
        from = comma + 1;
    }
}

bool write_to(const std::string& path, const std::string& text) {
    if (path == "-") {
        std::cout << text;
        return true;
    }
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
        std::cerr << "perfwire: cannot write " << path << "\n";
        return false;
    }
    return true;
}

// The API token: --token, else the file --token-file names, else $PERFWIRE_TOKEN.
std::string token_of(const std::string& token, const std::string& file) {
    if (!token.empty())
        return token;
    if (!file.empty()) {
        std::ifstream in(file);
        std::string t;
        std::getline(in, t);
        return t;
    }
    const char* env = std::getenv("PERFWIRE_TOKEN");
    return env ? env : "";
}

std::string env_or(const char* name, const std::string& given) {
    if (!given.empty())
        return given;
    const char* v = std::getenv(name);
    return v ? v : "";
}

// `text` as the collector takes an origin's value: one line (control characters as spaces),
// at most `bytes`, cut where a UTF-8 character begins.
std::string one_line(std::string text, std::size_t bytes) {
    for (auto& c : text)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
            c = ' ';
    if (text.size() > bytes) {
        std::size_t cut = bytes;
        while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
            --cut;
        text.resize(cut);
    }
    return text;
}

// What asks for the run, for its session: the options given, else the CI's own variables
// (GitLab CI's, GitHub Actions').
boost::json::object origin_from(std::string job, std::string url, std::string commit,
                                std::string branch) {
    job = env_or("CI_JOB_NAME", env_or("GITHUB_JOB", job));
    commit = env_or("CI_COMMIT_SHA", env_or("GITHUB_SHA", commit));
    branch = env_or("CI_COMMIT_REF_NAME", env_or("GITHUB_REF_NAME", branch));
    if (url.empty()) {
        url = env_or("CI_JOB_URL", "");
        const char *server = std::getenv("GITHUB_SERVER_URL"),
                   *repo = std::getenv("GITHUB_REPOSITORY"), *run = std::getenv("GITHUB_RUN_ID");
        if (url.empty() && server && repo && run)
            url = std::string(server) + "/" + repo + "/actions/runs/" + run;
    }
    boost::json::object o{{"by", "perfwire record"}};
    for (const auto& [key, value] :
         {std::pair{"job", &job}, {"url", &url}, {"commit", &commit}, {"branch", &branch}})
        if (!value->empty())
            o[key] = one_line(*value, 512);
    return o;
}

int record(int argc, char** argv) {
    std::string url, token, token_file, agent, process, callgraph, job, job_url, commit, branch;
    std::optional<int> pid;
    int seconds = 0, frequency = 0, timeout = 120;
    cmp::tls_trust trust;
    po::options_description opts("record options");
    opts.add_options()("help,h", "this text")("url", po::value(&url),
                                              "the collector: http[s]://HOST:PORT")(
        "token", po::value(&token), "its API token (else --token-file, else $PERFWIRE_TOKEN)")(
        "token-file", po::value(&token_file),
        "FILE holding the token (the collector's .http-token)")(
        "agent", po::value(&agent), "the target: its host name, enrolled name or id")(
        "pid", po::value<int>(), "the process to profile")(
        "process", po::value(&process),
        "the process to profile, by name (the busiest of that name)")("system", "the whole system")(
        "seconds", po::value(&seconds), "how long")("frequency", po::value(&frequency),
                                                    "samples a second (default: the agent's)")(
        "callgraph", po::value(&callgraph), "fp, dwarf, lbr or none (default: the agent's)")(
        "job", po::value(&job), "what asks (default: $CI_JOB_NAME, $GITHUB_JOB)")(
        "job-url", po::value(&job_url), "its URL (default: $CI_JOB_URL, the Actions run)")(
        "commit", po::value(&commit), "the commit (default: $CI_COMMIT_SHA, $GITHUB_SHA)")(
        "branch", po::value(&branch),
        "the branch (default: $CI_COMMIT_REF_NAME, $GITHUB_REF_NAME)")(
        "timeout", po::value(&timeout)->default_value(120),
        "SECONDS: the longest wait for one answer of the collector")(
        "tls-pin", po::value(&trust.pin),
        "sha256:HEX: an https collector's key (it prints it at its start)")(
        "tls-ca", po::value(&trust.ca_file),
        "FILE: the CA an https collector's certificate chains to (default: the system's)");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        if (vm.count("help")) {
            std::cout << usage << opts;
            return pass;
        }
        po::notify(vm);
        if (vm.count("pid"))
            pid = vm["pid"].as<int>();
    } catch (const std::exception& e) {
        std::cerr << "perfwire record: " << e.what() << "\n";
        return cannot;
    }
    const int targets = (pid ? 1 : 0) + (process.empty() ? 0 : 1) + (vm.count("system") ? 1 : 0);
    if (url.empty() || agent.empty() || targets != 1 || seconds < 1 || seconds > 86400 ||
        timeout < 1 || timeout > 86400) {
        std::cerr << "perfwire record: --url, --agent, one of --pid, --process and --system, and "
                     "--seconds (1 to 86400) are needed\n";
        return cannot;
    }
    const auto api =
        cmp::api_client::at(url, token_of(token, token_file), std::chrono::seconds(timeout), trust);
    const auto fail = [](const collector::failure& f) {
        std::cerr << "perfwire record: " << cmp::printable(f.message) << "\n";
        return cannot;
    };
    if (!api)
        return fail(api.error());
    // The target, by what it is called.
    const auto listed = api->get("/api/targets");
    if (!listed)
        return fail(listed.error());
    std::string id, names;
    if (!listed->is_array())
        return fail({"bad_answer", url + "/api/targets: not a list of targets"});
    for (const auto& t : listed->as_array()) {
        if (!t.is_object())
            continue;
        const auto& o = t.as_object();
        const auto* target_id = o.if_contains("id");
        if (!target_id || !target_id->is_string())
            continue;
        std::vector<std::string> called;
        for (const char* key : {"id", "hostname", "enrolled_as", "agent", "name"})
            if (const auto* v = o.if_contains(key); v && v->is_string())
                called.emplace_back(v->as_string());
        if (std::find(called.begin(), called.end(), agent) != called.end()) {
            if (!id.empty())
                return fail(
                    {"ambiguous", "more than one target is called " + agent + ": name it by id"});
            id = std::string(target_id->as_string());
        }
        names +=
            (names.empty() ? "" : ", ") + cmp::printable(called.size() > 1 ? called[1] : called[0]);
    }
    if (id.empty())
        return fail({"not_found",
                     "no target is called " + agent +
                         (names.empty() ? " (none is connected)" : " (there are " + names + ")")});
    const std::string command = "/api/targets/" + collector::url_encode(id) + "/command";
    if (!process.empty()) {
        const auto ps = api->post(command, boost::json::object{{"cmd", "list_processes"}});
        if (!ps)
            return fail(ps.error());
        double busiest = -1;
        const auto* answer = ps->if_object();
        if (const auto* list = answer ? answer->if_contains("processes") : nullptr;
            list && list->is_array())
            for (const auto& p : list->as_array()) {
                const auto* o = p.if_object();
                const auto* comm = o ? o->if_contains("comm") : nullptr;
                const auto* cpu = o ? o->if_contains("cpu") : nullptr;
                const auto* number = o ? o->if_contains("pid") : nullptr;
                const double c = cpu && cpu->is_number() ? cpu->to_number<double>() : 0;
                if (comm && comm->is_string() && comm->as_string() == process && c > busiest &&
                    number && number->is_int64() && number->as_int64() > 0 &&
                    number->as_int64() <= INT32_MAX) {
                    busiest = c;
                    pid = static_cast<int>(number->as_int64());
                }
            }
        if (!pid)
            return fail({"not_found", "no process called " + process + " on " + agent});
    }
    boost::json::object args;
    if (pid)
        args["pid"] = *pid;
    if (frequency > 0)
        args["frequency"] = frequency;
    if (!callgraph.empty())
        args["callgraph"] = callgraph;
    const auto started = api->post(
        command, boost::json::object{{"cmd", "start"},
                                     {"args", args},
                                     {"origin", origin_from(job, job_url, commit, branch)}});
    if (!started)
        return fail(started.error());
    // Its session, once the first samples made one; then the seconds asked, then a stop that
    // lets perf name what it has.
    const auto session_of = [&]() -> std::string {
        const auto now = api->get("/api/targets");
        if (now && now->is_array())
            for (const auto& t : now->as_array()) {
                const auto* o = t.if_object();
                const auto* tid = o ? o->if_contains("id") : nullptr;
                if (tid && tid->is_string() && tid->as_string() == id)
                    if (const auto* s = o->if_contains("session_id"); s && s->is_string())
                        // (printed for the job's next line, and put in paths: only a real id)
                        if (collector::session_store::valid_id(s->as_string()))
                            return std::string(s->as_string());
            }
        return {};
    };
    using clock = std::chrono::steady_clock;
    const auto poll = std::chrono::milliseconds(250);
    std::string session;
    for (const auto until = clock::now() + std::chrono::seconds(60);
         session.empty() && clock::now() < until;) {
        session = session_of();
        if (session.empty())
            std::this_thread::sleep_for(poll);
    }
    if (session.empty()) {
        (void)api->post(command, boost::json::object{{"cmd", "stop"}});
        return fail({"no_session", "the agent started but no samples came in 60 s"});
    }
    // The seconds asked, of samples: the session's span as the collector has it (its chunks
    // come about twice a second), or of the clock for a target too idle to be sampled that
    // long; a session that ended (its process exited) has what it will have.
    const auto meta_of = [&]() -> boost::json::object {
        const auto meta = api->get("/api/sessions/" + session);
        return meta && meta->is_object() ? meta->as_object() : boost::json::object();
    };
    const auto number = [](const boost::json::object& o, const char* key) {
        const auto* v = o.if_contains(key);
        return v && v->is_number() ? v->to_number<double>() : 0.0;
    };
    const auto ended = [](const boost::json::object& o) {
        const auto* live = o.if_contains("live");
        return live && live->is_bool() && !live->as_bool();
    };
    for (const auto until = clock::now() + std::chrono::seconds(seconds + 5);
         clock::now() < until;) {
        const auto meta = meta_of();
        if (ended(meta) || number(meta, "duration_sec") >= seconds)
            break;
        std::this_thread::sleep_for(poll);
    }
    const auto stopped = api->post(command, boost::json::object{{"cmd", "stop"}});
    if (!stopped)
        return fail(stopped.error());
    for (const auto until = clock::now() + std::chrono::minutes(2); clock::now() < until;) {
        if (ended(meta_of())) {
            std::cout << session << "\n";
            return pass;
        }
        std::this_thread::sleep_for(poll);
    }
    return fail({"not_ended", "session " + session + " did not end within 2 minutes of the stop"});
}

int compare(int argc, char** argv) {
    cmp::options o;
    cmp::source_options src;
    std::string junit, markdown, json_path, svg, link, share = "self", url, token, token_file;
    std::vector<std::string> sides, debug_dirs;
    int timeout = 120;
    cmp::tls_trust trust;
    collector::symbol_config src_symbols;
    po::options_description opts("options");
    opts.add_options()("help,h",
                       "this text")("share", po::value(&share)->default_value("self"),
                                    "self (the function's own time) or total (with what it calls)")(
        "threshold", po::value(&o.threshold_pct)->default_value(5),
        "PCT: a smaller change of a function's share passes")(
        "min-share", po::value(&o.min_share_pct)->default_value(1),
        "PCT: functions under this share on both sides are not checked")(
        "confidence", po::value(&o.confidence_pct)->default_value(99),
        "PCT: the report's false alarms stay within 100 - PCT %")(
        "anchor", po::value(&o.anchor),
        "NAME: shares of this function's total (a benchmark's main loop), not of the whole")(
        "ignore", po::value(&o.ignore)->composing(),
        "GLOB: functions, or modules (their file name), not checked; repeatable")(
        "event", po::value(&src.event), "the event to compare (default: the most sampled)")(
        "junit", po::value(&junit), "FILE: JUnit XML, a test case per function")(
        "markdown", po::value(&markdown), "FILE: a summary for a merge request")(
        "json", po::value(&json_path), "FILE: the whole report for other tools")(
        "svg", po::value(&svg), "FILE: the diff flame graph (any browser)")(
        "link", po::value(&link), "URL: where the comparison is seen, put in the reports")(
        "perf", po::value(&src.perf)->default_value("perf"), "perf, to read perf.data files")(
        "url", po::value(&url), "a collector (http[s]://HOST:PORT): runs may be its session ids")(
        "token", po::value(&token), "its API token (else --token-file, else $PERFWIRE_TOKEN)")(
        "token-file", po::value(&token_file),
        "FILE holding the token")("timeout", po::value(&timeout)->default_value(120),
                                  "SECONDS: the longest wait for one answer of the collector")(
        "tls-pin", po::value(&trust.pin),
        "sha256:HEX: an https collector's key (it prints it at its start)")(
        "tls-ca", po::value(&trust.ca_file),
        "FILE: the CA an https collector's certificate chains to (default: the system's)")(
        "binary", po::value(&src_symbols.binaries)->composing(),
        "FILE: an unstripped build naming a stripped one's code (matched by build-id, else by "
        "file name); repeatable")(
        "debug-dir", po::value(&debug_dirs)->composing(),
        "DIR: debug files by build-id (DIR/.build-id/ab/cdef….debug); repeatable");
    po::options_description hidden;
    hidden.add_options()("side", po::value(&sides));
    po::options_description all;
    all.add(opts).add(hidden);
    po::positional_options_description positional;
    positional.add("side", 2);
    try {
        po::variables_map vm;
        po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(),
                  vm);
        if (vm.count("help")) {
            std::cout << usage << opts;
            return pass;
        }
        po::notify(vm);
    } catch (const std::exception& e) {
        std::cerr << "perfwire compare: " << e.what() << "\n" << usage << opts;
        return cannot;
    }
    if (sides.size() != 2 || (share != "self" && share != "total") ||
        !(o.threshold_pct > 0 && o.threshold_pct <= 1e6) ||
        !(o.min_share_pct >= 0 && o.min_share_pct <= 100) ||
        !(o.confidence_pct > 0 && o.confidence_pct < 100) || !(timeout >= 1 && timeout <= 86400)) {
        std::cerr << "perfwire compare: "
                  << (sides.size() != 2 ? "a BASELINE and a CANDIDATE are needed"
                      : share != "self" && share != "total"
                          ? "--share is self or total"
                          : "--threshold is more than 0, --min-share from 0 to 100, "
                            "--confidence between 0 and 100, --timeout from 1 to 86400")
                  << "\n\n"
                  << usage << opts;
        return cannot;
    }
    o.total = share == "total";
    // Names for what a stripped build left unnamed: the builds and debug files given, and the
    // system's debug files.
    for (auto& d : debug_dirs)
        src_symbols.debug_dirs.push_back(std::move(d));
    collector::symbolizer names(src_symbols);
    src.names = &names;
    std::optional<cmp::api_client> api;
    if (!url.empty()) {
        auto a = cmp::api_client::at(url, token_of(token, token_file),
                                     std::chrono::seconds(timeout), trust);
        if (!a) {
            std::cerr << "perfwire compare: " << cmp::printable(a.error().message) << "\n";
            return cannot;
        }
        api = std::move(*a);
    }
    std::vector<std::string> ids[2]; // the collector's sessions on each side
    cmp::side base, cand;
    std::string fleet[2]; // a side's fleet selection, as the store's query
    const auto now = static_cast<std::int64_t>(std::time(nullptr)); // (both sides' last=)
    for (int i = 0; i < 2; ++i) {
        if (cmp::is_fleet(sides[i])) {
            // A fleet selection pools its devices itself (its commas are its own).
            auto query = cmp::fleet_query(sides[i], now, src.event);
            auto runs = !query ? collector::result<std::vector<cmp::run_table>>(query.error())
                        : api  ? cmp::run_from_fleet(*api, sides[i], src, now)
                               : collector::result<std::vector<cmp::run_table>>(collector::failure(
                                     "no_url", sides[i] + ": a fleet selection is asked "
                                                           "of a collector: give --url"));
            if (!runs) {
                std::cerr << "perfwire compare: " << cmp::printable(runs.error().message) << "\n";
                return cannot;
            }
            fleet[i] = *query;
            for (const auto& run : *runs)
                cmp::add_run(i ? cand : base, run);
            continue;
        }
        const auto paths = split_on(sides[i], ',');
        if (paths.empty()) {
            std::cerr << "perfwire compare: the " << (i ? "candidate" : "baseline")
                      << " names no run\n";
            return cannot;
        }
        for (const auto& p : paths) {
            std::error_code ec;
            const bool local = !api || std::filesystem::exists(p, ec);
            if (api && local && collector::session_store::valid_id(p)) {
                std::cerr << "perfwire compare: " << cmp::printable(p)
                          << " is both a file here and a session id: name the file ./"
                          << cmp::printable(p)
                          << ", or run elsewhere for the collector's session\n";
                return cannot;
            }
            auto run = local ? cmp::run_from_path(p, src) : cmp::run_from_session(*api, p, src);
            if (!local)
                ids[i].push_back(p);
            if (!run) {
                std::cerr << "perfwire compare: " << cmp::printable(run.error().message) << "\n";
                return cannot;
            }
            cmp::add_run(i ? cand : base, *run);
        }
    }
    // Where a person sees it: the collector's diff view of the first session of each side; the
    // Fleet view comparing two builds of the same devices and time.
    if (link.empty() && api && !ids[0].empty() && !ids[1].empty())
        link = api->base() + "/#session=" + ids[1][0] + "&baseline=" + ids[0][0] + "&tab=functions";
    if (link.empty() && api && !fleet[0].empty() && !fleet[1].empty())
        link = cmp::fleet_link(api->base(), fleet[0], fleet[1], now);
    const auto r = cmp::judge(base, cand, o);
    bool written = true;
    if (!junit.empty())
        written &= write_to(junit, cmp::to_junit(r, base, cand));
    if (!markdown.empty())
        written &= write_to(markdown, cmp::to_markdown(r, base, cand, link));
    if (!json_path.empty())
        written &= write_to(json_path, cmp::to_json(r, base, cand, link));
    if (!svg.empty())
        written &= write_to(
            svg, cmp::to_svg(base, cand, "perfwire compare: " + sides[1] + " against " + sides[0]));
    if (markdown != "-" && json_path != "-" && junit != "-" && svg != "-")
        std::cout << cmp::to_markdown(r, base, cand, link);
    return written ? r.status : cannot;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        char name[] = "compare", help[] = "--help";
        char* args[] = {name, help, nullptr};
        compare(2, args);
        return argc < 2 ? cannot : pass;
    }
    if (std::string(argv[1]) == "--version") {
        std::cout << "perfwire " PERFWIRE_VERSION "\n";
        return pass;
    }
    // (an answer of a shape nothing checked for is "could not compare", never a crash)
    try {
        if (std::string(argv[1]) == "compare")
            return compare(argc - 1, argv + 1);
        if (std::string(argv[1]) == "record")
            return record(argc - 1, argv + 1);
    } catch (const std::exception& e) {
        std::cerr << "perfwire " << argv[1] << ": " << cmp::printable(e.what()) << "\n";
        return cannot;
    }
    std::cerr << "perfwire: unknown command " << argv[1] << " (compare, record)\n";
    return cannot;
}
