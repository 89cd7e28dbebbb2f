// The flight recorder's triggers on the device (agent/triggers.hpp): a log followed through
// rotation and truncation, processes of a name starting and exiting, a file touched, and the
// checks a bad trigger meets at start.
#include "agent/triggers.hpp"

#include "support/agents.hpp"
#include "support/fixtures.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

using namespace agent;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

void append(const fs::path& p, const std::string& text) {
    std::ofstream(p, std::ios::app | std::ios::binary) << text;
}

// A /proc/PID of `name`, started at `start` (clock ticks), in a made-up proc root.
void fake_process(const fs::path& root, int pid, const std::string& name, int start,
                  char state = 'S') {
    const auto dir = root / std::to_string(pid);
    fs::create_directories(dir);
    std::ofstream(dir / "comm") << name << "\n";
    std::string rest = std::string(1, state) + " 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 " +
                       std::to_string(start) + " 1000 10";
    std::ofstream(dir / "stat") << pid << " (" << name << ") " << rest << "\n";
}

} // namespace

TEST_CASE("a log is followed as it grows: only lines added, whole, a long one cut",
          "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto log = dir.path / "app.log";
    append(log, "old news\nmore old news\n");
    log_tail tail(log.string());
    CHECK(tail.poll().empty()); // what it held at the start
    CHECK(tail.problem().empty());
    append(log, "first\nsecond and a half");
    CHECK(tail.poll() == std::vector<std::string>{"first"});
    append(log, " more\n");
    CHECK(tail.poll() == std::vector<std::string>{"second and a half more"});
    append(log, std::string(line_pattern::max_line + 500, 'x') + "\nafter\n");
    const auto lines = tail.poll();
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == std::string(line_pattern::max_line, 'x'));
    CHECK(lines[1] == "after");
    CHECK(tail.poll().empty());
}

TEST_CASE("a rotated log is read to its end, then the new one from its start — a truncated one "
          "from its start again",
          "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto log = dir.path / "app.log";
    append(log, "before\n");
    log_tail tail(log.string());
    CHECK(tail.poll().empty());
    append(log, "last of the old\n");
    fs::rename(log, dir.path / "app.log.1"); // logrotate's rename, then a new file
    append(log, "first of the new\n");
    CHECK(tail.poll() == std::vector<std::string>{"last of the old", "first of the new"});
    // copytruncate: the same file, cut to nothing, written again
    fs::resize_file(log, 0);
    append(log, "again\n");
    CHECK(tail.poll() == std::vector<std::string>{"again"});
    // Gone: said, and a file that appears later is read from its start.
    fs::remove(log);
    CHECK(tail.poll().empty());
    CHECK_THAT(tail.problem(), Catch::Contains("waiting for it"));
    append(log, "back\n");
    CHECK(tail.poll() == std::vector<std::string>{"back"});
    CHECK(tail.problem().empty());
    // Not a regular file (a FIFO would block a reader): refused, said.
    fs::remove(log);
    REQUIRE(::mkfifo(log.c_str(), 0600) == 0);
    CHECK(tail.poll().empty());
    CHECK_THAT(tail.problem(), Catch::Contains("not a regular file"));
}

TEST_CASE("a log that is someone else's link in a directory anyone may write to is not followed",
          "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto open_dir = dir.path / "tmp";
    fs::create_directory(open_dir);
    fs::permissions(open_dir, fs::perms::all);
    const auto secret = dir.path / "secret";
    append(secret, "root only\n");
    const auto log = open_dir / "app.log";
    fs::create_symlink(secret, log);
    REQUIRE(::lchown(log.c_str(), 65534, 65534) == 0); // (another user's link)
    log_tail tail(log.string());
    (void)tail.poll();
    append(secret, "watchdog fired: the secret\n");
    CHECK(tail.poll().empty());
    CHECK_THAT(tail.problem(), Catch::Contains("a link in a directory anyone may write to"));
    // The owner's own link (root's) is followed: from its start, as a log that appeared.
    REQUIRE(::lchown(log.c_str(), 0, 0) == 0);
    CHECK(tail.poll() == std::vector<std::string>{"root only", "watchdog fired: the secret"});
    CHECK(tail.problem().empty());
}

TEST_CASE("a log flooded between polls is read a bounded amount at a time", "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto log = dir.path / "app.log";
    append(log, "");
    log_tail tail(log.string());
    (void)tail.poll();
    const std::string line(99, 'y');
    std::string flood;
    for (std::size_t i = 0; i < (log_tail::max_read * 3) / 100; ++i)
        flood += line + "\n";
    append(log, flood);
    const auto first = tail.poll().size();
    CHECK(first > 0);
    CHECK(first <= log_tail::max_read / 100);
    std::size_t all = first;
    for (int i = 0; i < 5; ++i)
        all += tail.poll().size();
    CHECK(all == (log_tail::max_read * 3) / 100);
}

TEST_CASE("processes of a name starting and exiting are told apart from a reused pid",
          "[agent][triggers]") {
    test_support::temp_dir root;
    fake_process(root.path, 100, "watchdog", 5);
    fake_process(root.path, 200, "other", 6);
    process_watch w("watchdog", root.path.string());
    CHECK(w.poll().empty()); // those running at the start
    fake_process(root.path, 300, "watchdog", 9);
    fake_process(root.path, 400, "other", 9);
    auto changes = w.poll();
    REQUIRE(changes.size() == 1);
    CHECK(changes[0].pid == 300);
    CHECK(changes[0].started);
    fs::remove_all(root.path / "100");
    fake_process(root.path, 300, "watchdog", 12); // pid 300 again: another process
    changes = w.poll();
    REQUIRE(changes.size() == 3);
    CHECK(changes[0].pid == 100);
    CHECK_FALSE(changes[0].started);
    CHECK(changes[1].pid == 300);
    CHECK_FALSE(changes[1].started);
    CHECK(changes[2].pid == 300);
    CHECK(changes[2].started);
    fake_process(root.path, 300, "watchdog", 12, 'Z'); // a zombie has exited
    changes = w.poll();
    REQUIRE(changes.size() == 1);
    CHECK_FALSE(changes[0].started);
    CHECK(w.poll().empty());
}

TEST_CASE("a trigger file fires when it appears or is touched", "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto path = dir.path / "capture-now";
    file_watch w(path.string());
    CHECK_FALSE(w.poll());
    CHECK_FALSE(w.poll());
    append(path, "");
    CHECK(w.poll());
    CHECK_FALSE(w.poll());
    const timespec later[2] = {{1000, 0}, {1000, 0}}; // (touch within the same tick: another time)
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), later, 0) == 0);
    CHECK(w.poll());
    CHECK_FALSE(w.poll());
    fs::remove(path);
    CHECK_FALSE(w.poll());
    append(path, "");
    CHECK(w.poll());

    // There at the start: not a firing.
    file_watch there(path.string());
    CHECK_FALSE(there.poll());
}

TEST_CASE("a log line that matches fires, said with the line — levels held extend",
          "[agent][triggers]") {
    test_support::temp_dir dir;
    const auto log = dir.path / "app.log";
    append(log, "watchdog fired long ago\n");
    trigger_settings t;
    t.log = log.string() + ":watchdog (fired|bit)";
    t.memory = "0.001:0"; // any device uses more memory than that
    REQUIRE(check_triggers(t, false).empty());
    trigger_watch w(t, std::nullopt);
    const auto now = flight_clock::now();
    auto r = w.poll(now);
    REQUIRE(r.fired.size() == 1);
    CHECK_THAT(r.fired[0], Catch::StartsWith("memory in use at "));
    CHECK(w.memory_pct() > 0);
    r = w.poll(now + 250ms);
    CHECK(r.fired.empty()); // (a level fires once while it stays above)
    CHECK(r.holding);
    append(log, "all well\nthe watchdog bit \x1b[31mred\x1b[0m\nwatchdog fired\n");
    r = w.poll(now + 500ms);
    REQUIRE(r.fired.size() == 1);
    CHECK(r.fired[0] == "log " + log.string() + ": the watchdog bit ?[31mred?[0m");
    w.refused();
    r = w.poll(now + 750ms);
    REQUIRE(r.fired.size() == 1); // refused: fires again while above
    CHECK_THAT(r.fired[0], Catch::StartsWith("memory in use at "));
}

TEST_CASE("a trigger that cannot work is refused at start, saying why", "[agent][triggers]") {
    test_support::temp_dir dir;
    // One trigger set, the rest not.
    const auto check = [](std::string trigger_settings::*field, std::string value,
                          bool pid = true) {
        trigger_settings t;
        t.*field = std::move(value);
        return check_triggers(t, pid);
    };
    CHECK(check_triggers({}, false).empty());
    CHECK_THAT(check(&trigger_settings::cpu, "50", false), Catch::Contains("needs --pid"));
    CHECK_THAT(check(&trigger_settings::cpu, "fifty"), Catch::Contains("--trigger-cpu: the level"));
    CHECK_THAT(check(&trigger_settings::memory, "101"), Catch::Contains("--trigger-memory"));
    CHECK_THAT(check(&trigger_settings::load, "4:99999"),
               Catch::Contains("--trigger-load: how long"));
    CHECK(check(&trigger_settings::load, "4:30").empty());
    CHECK_THAT(check(&trigger_settings::log, "no-colon"), Catch::Contains("FILE:REGEX"));
    CHECK_THAT(check(&trigger_settings::log, "relative.log:x"), Catch::Contains("absolute path"));
    CHECK_THAT(check(&trigger_settings::log, "/no/such/dir/app.log:x"),
               Catch::Contains("no directory"));
    CHECK(check(&trigger_settings::log, (dir.path / "not-yet.log").string() + ":x").empty());
    CHECK_THAT(check(&trigger_settings::log, (dir.path / "a.log").string() + ":(a"),
               Catch::Contains("--trigger-log"));
    CHECK(check(&trigger_settings::log, (dir.path / "a.log").string() + ":(a+)+$")
              .empty()); // linear here
    CHECK_THAT(check(&trigger_settings::process, "a/b"), Catch::Contains("--trigger-process"));
    CHECK_THAT(check(&trigger_settings::process, "sixteen-letters!"),
               Catch::Contains("1-15 bytes"));
    CHECK(check(&trigger_settings::process, "watchdog").empty());
    CHECK_THAT(check(&trigger_settings::file, "tmp/x"),
               Catch::Contains("--trigger-file takes an absolute"));
}

TEST_CASE("the Python agent refuses the same triggers with the same words, and follows a log "
          "alike",
          "[agent][triggers][python]") {
    test_support::temp_dir dir;
    const auto d = dir.path.string();
    // field, value, with a pid
    const std::vector<std::tuple<std::string, std::string, bool>> cases = {
        {"cpu", "50", false},
        {"cpu", "fifty", true},
        {"cpu", "50:3601", true},
        {"memory", "101", true},
        {"memory", "90:2", true},
        {"load", "0", true},
        {"load", "4:30", true},
        {"log", "no-colon", true},
        {"log", "relative:x", true},
        {"log", "/no/such/dir/a.log:x", true},
        {"log", d + "/a.log:(a", true},
        {"log", d + "/a.log:a{200}", true},
        {"log", d + "/a.log:(a+)+$", true},
        {"process", "a/b", true},
        {"process", "sixteen-letters!", true},
        {"process", "watchdog", true},
        {"file", "tmp/x", true},
        {"file", d + "/now", true},
    };
    std::string want, script;
    for (const auto& [field, value, pid] : cases) {
        trigger_settings t;
        for (auto [name, member] : {std::pair{"cpu", &trigger_settings::cpu},
                                    {"memory", &trigger_settings::memory},
                                    {"load", &trigger_settings::load},
                                    {"log", &trigger_settings::log},
                                    {"process", &trigger_settings::process},
                                    {"file", &trigger_settings::file}})
            if (field == name)
                t.*member = value;
        want += check_triggers(t, pid) + "\n";
        script += "print(a.check_triggers({'" + field + "': '" + value + "'}, " +
                  (pid ? "True" : "False") + "))\n";
    }
    // The log scenario of the C++ test above: rotation, truncation, a gap, a long line.
    const auto log = dir.path / "p.log";
    script += "import os\n"
              "p = '" +
              log.string() +
              "'\n"
              "open(p, 'w').write('old\\n')\n"
              "t = a.LogTail(p)\n"
              "def show(): print([l.decode() if len(l) < 100 else len(l) for l in t.poll()], "
              "t.problem)\n"
              "show()\n"
              "open(p, 'a').write('first\\nsecond ')\n"
              "show()\n"
              "open(p, 'a').write('half\\nlast of the old\\n' + 'x' * 20000 + '\\n')\n"
              "os.rename(p, p + '.1'); open(p, 'a').write('first of the new\\n')\n"
              "show()\n"
              "open(p, 'w').write('again\\n')\n"
              "show()\n"
              "os.remove(p)\n"
              "show()\n"
              "open(p, 'a').write('back\\n')\n"
              "show()\n";
    want += "[] \n"
            "['first'] \n"
            "['second half', 'last of the old', 16384, 'first of the new'] \n"
            "['again'] \n"
            "[] no file " +
            log.string() +
            " (waiting for it)\n"
            "['back'] \n";
    CHECK(test_support::python_agent_output(script) == want);
}
