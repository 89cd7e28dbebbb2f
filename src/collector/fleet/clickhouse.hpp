// A client for ClickHouse's HTTP interface: a statement (and, for an INSERT, its data) in, the
// answer's body or a failure out. No ClickHouse library and no Beast in this header; each call
// blocks its caller (the fleet store's own thread) for at most the configured timeout.
//
// Kept to what ClickHouse 18.16 (Debian bookworm's) and current releases both accept: POST with
// the statement in the `query` parameter, the database in `database`, the user and password by
// HTTP Basic authentication; an error is any status but 200, its body ClickHouse's message.
#pragma once

#include "collector/result.hpp"

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace collector {

struct clickhouse_config {
    std::string url; // http://host:port (the HTTP interface, 8123 by default)
    std::string database = "perfwire";
    std::string user = "default";
    std::string password;
    std::chrono::milliseconds timeout{30000}; // one statement, from connecting to the last byte
};

class clickhouse_client {
public:
    // Checks the URL (http://HOST[:PORT][/]); the server is not contacted.
    static result<clickhouse_client> make(clickhouse_config c);

    const clickhouse_config& config() const noexcept { return cfg_; }
    // The endpoint as "host:port", for messages.
    std::string where() const { return host_ + ":" + port_; }

    // Runs `sql`; `data` is sent after it as the statement's input (INSERT … FORMAT …). The
    // answer's body, at most `max_answer` bytes. `in_database`: whether the statement runs in
    // the configured database (false for CREATE DATABASE before it exists).
    result<std::string> run(std::string_view sql, std::string_view data = {},
                            std::size_t max_answer = std::size_t{64} << 20,
                            bool in_database = true) const;

private:
    clickhouse_client() = default;
    clickhouse_config cfg_;
    std::string host_, port_;
};

// `s` as a ClickHouse string literal: quoted, with quotes, backslashes and control bytes escaped.
std::string clickhouse_quote(std::string_view s);

} // namespace collector
