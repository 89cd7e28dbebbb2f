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
#include <cstdint>
#include <string>
#include <string_view>

namespace collector {

struct clickhouse_config {
    std::string url; // http://host:port (the HTTP interface, 8123 by default)
    std::string database = "perfwire";
    std::string user = "default";
    std::string password;
    std::chrono::milliseconds timeout{30000}; // one statement, from connecting to the last byte
    // What one question (ask()) may take of the server: ClickHouse stops it past any of these.
    unsigned query_seconds = 10;
    std::uint64_t query_bytes = std::uint64_t{1} << 30; // memory
    std::uint64_t query_groups = 5'000'000;             // distinct keys of one GROUP BY
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
    // A question (the Fleet API's SELECTs): run read-only within the configured limits and an
    // answer of at most `max_answer` bytes. One past a limit fails with "fleet_query_limit"
    // (422) saying which, and ClickHouse stops it rather than run on after the collector gave up.
    result<std::string> ask(std::string_view sql,
                            std::size_t max_answer = std::size_t{64} << 20) const;

private:
    result<std::string> exchange(std::string_view sql, std::string_view data,
                                 std::size_t max_answer, bool in_database,
                                 std::string_view settings) const;
    clickhouse_client() = default;
    clickhouse_config cfg_;
    std::string host_, port_;
};

// `s` as a ClickHouse string literal: quoted, with quotes, backslashes and control bytes escaped.
std::string clickhouse_quote(std::string_view s);

} // namespace collector
