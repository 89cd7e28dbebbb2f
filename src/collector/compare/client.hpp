// A collector's HTTP API as a CI job's command uses it: blocking requests with the API token
// (Authorization: Bearer), over plain HTTP on the lab's network. No Asio in this header.
#pragma once

#include "collector/result.hpp"

#include <boost/json/value.hpp>

#include <chrono>
#include <string>
#include <utility>

namespace collector::compare {

class api_client {
public:
    // `url`: http://HOST[:PORT] (the collector's --http-port, 8080 by default).
    static result<api_client> at(const std::string& url, std::string token);

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
    // Status and body; a failure only when no answer came.
    result<std::pair<int, std::string>> exchange(const char* method, const std::string& target,
                                                 const std::string& body) const;
    std::string host_, port_, base_, token_;
    std::chrono::seconds timeout_{120};
};

} // namespace collector::compare
