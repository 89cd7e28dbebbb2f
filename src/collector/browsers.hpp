// What the collector's core tells the browsers: that something they show changed, an agent's
// metrics record, an import's progress. The HTTP side implements it (http/events.hpp forms the
// events, coalesces the changes and keeps the streams); the core never sees a stream, an
// event's format or anything under http/.
#pragma once

#include <boost/json/fwd.hpp>

#include <string>
#include <string_view>

namespace collector {

// What the browsers are told changed.
enum class change {
    targets,  // an agent came, went, or changed state
    data,     // a live session took a chunk
    sessions, // a session was created, ended, imported or removed
    status,   // the collector's status may have changed (its memory, connections, fleet store)
};

class browser_feed {
public:
    virtual ~browser_feed() = default;
    // I/O thread, whenever something the UI shows changed. `id`: the target's for
    // change::targets, else the session's.
    virtual void changed(change what, const std::string& id) = 0;
    // One metrics record of a live session, as protocol::serialize wrote it.
    virtual void metrics(std::string_view session_id, std::string_view record) = 0;
    // {"import", "phase", "bytes", "samples", "total"?}.
    virtual void import_progress(const boost::json::object& progress) = 0;
    // The collector stops: nothing more is told.
    virtual void stop() = 0;
};

} // namespace collector
