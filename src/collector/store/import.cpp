#include "collector/store/import.hpp"

#include "collector/parse/perf_script.hpp"
#include "collector/symbols/subprocess.hpp"
#include "protocol/compression.hpp"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace collector {
import_result import_recording(session_store& store, const std::string& path,
                               const std::string& display_name, const std::string& perf) {
    import_result r;
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        r.error = "cannot read " + display_name;
        return r;
    }
    char magic[8] = {};
    in.read(magic, sizeof magic);
    std::string text;
    if (std::string_view(magic, 8) == "PERFILE2") {
        auto c = run_capture({perf, "script", "-i", path, "--show-lost-events", "-F",
                              "comm,tid,pid,time,period,event,ip,sym,symoff,dso"});
        if (c.code != 0) // recorded without some field, or an old perf: default format
            c = run_capture({perf, "script", "-i", path, "--show-lost-events"});
        if (c.code != 0) {
            r.error = "perf script failed on " + display_name + ": " + c.err.substr(0, 300);
            return r;
        }
        text = std::move(c.out);
    } else {
        in.seekg(0);
        std::stringstream ss;
        ss << in.rdbuf();
        text = ss.str();
    }

    profile check;
    script_parser parser(check);
    parser.feed(text);
    parser.finish();
    if (parser.stats().samples == 0) {
        r.error = display_name + " holds no perf script samples";
        return r;
    }
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    boost::json::object meta{{"agent", "import"},
                             {"hostname", ""},
                             {"source", display_name},
                             {"started_at", now},
                             {"ended_at", now},
                             {"live", false},
                             {"samples", parser.stats().samples}};
    auto w = store.create("import", meta);
    if (!w) {
        r.error = "cannot create the session: " + w.error().message();
        return r;
    }
    if (auto ec = w->write_chunk(true, protocol::compress(text))) {
        r.error = "cannot store the session: " + ec.message();
        return r;
    }
    r.session_id = w->id();
    return r;
}

} // namespace collector
