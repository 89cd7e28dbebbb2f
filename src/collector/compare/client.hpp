// A collector's HTTP API as a CI job's command uses it: blocking requests with the API token
// (Authorization: Bearer), over HTTP or HTTPS (a pinned key or a CA). No Asio in this header.
#pragma once

#include "collector/result.hpp"

#include <boost/json/value.hpp>

#include <chrono>
#include <string>
#include <string_view>
#include <utility>

namespace collector::compare {

// `text` with control characters (C0, DEL, C1) as '?': what a peer said, safe to print in a
// CI log (no escape sequence or carriage return rewrites the lines around it).
std::string printable(std::string_view text);

// Whom an https:// collector must be: the key it pins (--tls-pin "sha256:HEX", what the
// collector prints at its start and its /api/status says), else a certificate that chains to
// the CA file and names the host (the system's bundle when neither is given).
struct tls_trust {
    std::string pin, ca_file;
};

class api_client {
public:
    // An answer's largest body: JSON (a session's functions), text (a collapsed export).
    static constexpr std::size_t max_json = std::size_t{64} << 20,
                                 max_text = std::size_t{256} << 20;

    // `url`: http://HOST[:PORT] (the collector's --http-port, 8080 by default).
    // `url`: http[s]://HOST[:PORT]. `timeout`: the longest wait for one answer.
    static result<api_client> at(const std::string& url, std::string token,
                                 std::chrono::seconds timeout = std::chrono::seconds(120),
                                 tls_trust trust = {});

    // The answer's JSON for a 2xx, else a failure with the API's message.
    result<boost::json::value> get(const std::string& target) const;
    result<boost::json::value> post(const std::string& target,
                                    const boost::json::value& body) const;
    // The answer's body as it is, for a 2xx (an export).
    result<std::string> get_text(const std::string& target) const;

    const std::string& base() const noexcept { return base_; } // "http://host:port"

private:
    result<boost::json::value> call(const char* method, const std::string& target,
                                    const std::string& body) const;
    // Status and body; a failure only when no whole answer came within the timeout (from the
    // name's lookup to the body's end) or its body is over `max_body`.
    result<std::pair<int, std::string>> exchange(const char* method, const std::string& target,
                                                 const std::string& body,
                                                 std::size_t max_body) const;
    std::string host_, port_, base_, token_;
    bool https_ = false;
    tls_trust trust_;
    std::chrono::seconds timeout_{120};
};

} // namespace collector::compare
