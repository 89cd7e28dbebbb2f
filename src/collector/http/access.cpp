#include "collector/http/access.hpp"
#include "protocol/digest.hpp"

#include "collector/http/routes.hpp"
#include "protocol/pairing.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace collector {
namespace json = boost::json;
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() &&
           (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n'))
        s.remove_suffix(1);
    return s;
}

bool equals_token(std::string_view presented, std::string_view token) {
    return !token.empty() && protocol::constant_time_equal(token, presented);
}

} // namespace

bool valid_token(std::string_view token) {
    if (token.size() < 16 || token.size() > 256)
        return false;
    for (char c : token)
        if (c <= ' ' || c > '~' || c == ';' || c == ',' || c == '"' || c == '\\' || c == '%' ||
            c == '&' || c == '#' || c == '+' || c == '=')
            return false;
    return true;
}

namespace {

failure token_failure(std::string why) {
    return {"token", std::move(why), 500};
}

} // namespace

result<std::string> load_or_create_token(const std::filesystem::path& file) {
    // Created exclusively, so two collectors starting together agree on one token.
    const int created = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (created >= 0) {
        const std::string token = protocol::generate_pairing_code();
        const std::string line = token + "\n";
        const bool written =
            ::write(created, line.data(), line.size()) == static_cast<ssize_t>(line.size()) &&
            ::fsync(created) == 0;
        const int write_errno = errno;
        ::close(created);
        if (written)
            return token;
        ::unlink(file.c_str());
        return token_failure("cannot write " + file.string() + ": " + std::strerror(write_errno));
    }
    if (errno != EEXIST)
        return token_failure("cannot create " + file.string() + ": " + std::strerror(errno));
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            ::close(fd);
        return token_failure("cannot read " + file.string() + " (a regular file, not a link)");
    }
    if ((st.st_mode & 077) != 0) {
        ::close(fd);
        return token_failure(file.string() + " is readable by others: chmod 600 it");
    }
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    ::close(fd);
    const auto token = trim(std::string_view(buf, n > 0 ? static_cast<std::size_t>(n) : 0));
    if (!valid_token(token))
        return token_failure(file.string() +
                             " does not hold a token (16 to 256 letters, digits or -._~)");
    return std::string(token);
}

bool presents_token(std::string_view authorization, std::string_view cookie,
                    std::string_view token) {
    const auto auth = trim(authorization);
    constexpr std::string_view bearer = "Bearer ";
    if (auth.size() > bearer.size() && auth.substr(0, bearer.size()) == bearer &&
        equals_token(trim(auth.substr(bearer.size())), token))
        return true;
    // Cookie: a=1; perfwire_token_1a2b3c4d=...; b=2
    const auto name = token_cookie(token);
    while (!cookie.empty()) {
        const auto semi = cookie.find(';');
        const auto pair = trim(cookie.substr(0, semi));
        cookie = semi == std::string_view::npos ? std::string_view{} : cookie.substr(semi + 1);
        const auto eq = pair.find('=');
        if (eq != std::string_view::npos && pair.substr(0, eq) == name &&
            equals_token(pair.substr(eq + 1), token))
            return true;
    }
    return false;
}

std::optional<std::string> query_parameter(std::string_view target, std::string_view name) {
    const auto q = target.find('?');
    if (q == std::string_view::npos)
        return std::nullopt;
    auto query = target.substr(q + 1);
    query = query.substr(0, query.find('#'));
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (pair.size() > name.size() && pair.substr(0, name.size()) == name &&
            pair[name.size()] == '=')
            return std::string(pair.substr(name.size() + 1));
    }
    return std::nullopt;
}

sign_in_codes::sign_in_codes()
    : code_(protocol::generate_pairing_code()) {}

std::string sign_in_codes::current() const {
    std::lock_guard lock(mutex_);
    return code_;
}

bool sign_in_codes::redeem(std::string_view code) {
    std::lock_guard lock(mutex_);
    if (!protocol::constant_time_equal(code_, code))
        return false;
    code_ = protocol::generate_pairing_code();
    return true;
}

std::string token_cookie(std::string_view token) {
    return "perfwire_token_" + protocol::sha256_hex(token).substr(0, 8);
}

std::string sign_in_cookie(std::string_view token, bool secure) {
    return token_cookie(token) + "=" + std::string(token) + "; Path=/; HttpOnly; SameSite=Strict" +
           (secure ? "; Secure" : "");
}

namespace {

// The name in a Host header, lowercased ("LocalHost:8080" -> "localhost", "[::1]:80" ->
// "[::1]"); empty when anything but ":" and a port of digits follows the name, so
// "localhost:8080@evil.example" names nothing.
std::string host_only(std::string_view host) {
    std::string_view name = host, rest;
    if (!host.empty() && host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos)
            return {};
        name = host.substr(0, close + 1);
        rest = host.substr(close + 1);
    } else if (const auto colon = host.find(':'); colon != std::string_view::npos) {
        name = host.substr(0, colon);
        rest = host.substr(colon);
    }
    if (!rest.empty() &&
        (rest.size() < 2 || rest.size() > 6 || rest[0] != ':' ||
         !std::all_of(rest.begin() + 1, rest.end(), [](char c) { return c >= '0' && c <= '9'; })))
        return {};
    std::string out(name);
    for (char& c : out)
        if (c >= 'A' && c <= 'Z')
            c = static_cast<char>(c - 'A' + 'a');
    return out;
}

bool allowed_host(const app_context& app, std::string_view host) {
    const auto h = host_only(host);
    return !h.empty() && (h == "localhost" || h == "127.0.0.1" || h == "[::1]" ||
                          (h == app.cfg.http_bind && app.cfg.http_bind != "0.0.0.0"));
}

} // namespace

std::optional<http_response> check_access(const app_context& app, const http_request& req) {
    const auto host = req[http::field::host];
    if (!allowed_host(app, host))
        return make_error(req, http::status::forbidden, "bad_host",
                          "the Host header must name this collector");
    const auto method = req.method();
    const bool changes = method == http::verb::post || method == http::verb::put ||
                         method == http::verb::patch || method == http::verb::delete_;
    // A WebSocket handshake is sent cross-site with the page's cookies: only the collector's
    // own page may open one (cross-site WebSocket hijacking). Any request to switch protocols
    // is checked so ("Upgrade: websocket, foo" is a WebSocket handshake to the server too).
    const bool upgrade = !req[http::field::upgrade].empty();
    if (changes || upgrade) {
        const auto origin = req[http::field::origin];
        const std::string scheme = app.http_tls ? "https://" : "http://";
        if (!origin.empty() && origin != scheme + std::string(host))
            return make_error(req, http::status::forbidden, "bad_origin",
                              upgrade ? "a live stream must be opened by the collector's own page"
                                      : "requests that change state must come from the "
                                        "collector's own page");
    }
    const std::string_view target(req.target().data(), req.target().size());
    // The UI's own files, and the agent executables (public builds, checked by their sha256,
    // fetched from the device itself), need no token.
    const bool get = method == http::verb::get || method == http::verb::head;
    const bool ui_file = get && ((target.rfind("/api/", 0) != 0 && target != "/api") ||
                                 target.rfind("/api/agent-binaries", 0) == 0);
    // (Signing in presents the token in the body; a state change, so the Origin was checked.)
    const bool sign_in = method == http::verb::post && target == "/api/sign-in";
    if (!app.api_token.empty() && !ui_file && !sign_in &&
        !presents_token(req[http::field::authorization], req[http::field::cookie], app.api_token)) {
        auto res = make_json(
            req, http::status::unauthorized,
            json::object{
                {"error", json::object{{"code", "unauthorized"},
                                       {"message", "this collector asks for its access token: "
                                                   "open the sign-in link it printed (UI and "
                                                   "API on http://…/?code=…), or send "
                                                   "Authorization: Bearer with the token kept in " +
                                                       app.api_token_file},
                                       {"token_file", app.api_token_file}}}});
        res.set(http::field::www_authenticate, "Bearer realm=\"perfwire\"");
        return res;
    }
    return std::nullopt;
}

} // namespace collector
