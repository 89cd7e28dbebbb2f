// The HTTP API's secret. Every request but the UI's static files must present it, as an
// `Authorization: Bearer` header or the `perfwire_token` cookie that signing in sets; so a
// local process or a page from elsewhere that reaches the port can neither read a profile nor
// steer an agent. Pure functions: no Beast, no sockets (check_access in http/routes.hpp applies
// them to a request).
#pragma once

#include "collector/result.hpp"

#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace collector {

// The sign-in cookie's name: one per collector ("perfwire_token_" and the first 8 hex digits
// of the token's SHA-256), as a browser keeps one cookie of a name per host whatever the port:
// two collectors on one host keep their own.
std::string token_cookie(std::string_view token);

// The token kept in `file` (created with a fresh random token, mode 0600, when missing); a
// failure when it can be neither read nor created, or is not a usable token.
result<std::string> load_or_create_token(const std::filesystem::path& file);

// Whether the request's Authorization and Cookie header values carry `token`. Compared in
// constant time.
bool presents_token(std::string_view authorization, std::string_view cookie,
                    std::string_view token);

// A query parameter of a request target, if any ("/?code=abc", "code" -> "abc").
std::optional<std::string> query_parameter(std::string_view target, std::string_view name);

// One-time sign-in links ("/?code=…"). The collector prints a link with the code it holds;
// opening it signs that browser in (the token's cookie) and spends the code, and the next one
// is held (and printed). A link left in a browser's history is then worth nothing, where one
// carrying the access token would sign anyone in for good. Any thread.
class sign_in_codes {
public:
    sign_in_codes();
    std::string current() const;
    // Whether `code` is the one held (compared in constant time); if so it is spent and the
    // next one is made.
    bool redeem(std::string_view code);

private:
    mutable std::mutex mutex_;
    std::string code_;
};

// The Set-Cookie value that signs a browser in: HttpOnly (no script reads it) and
// SameSite=Strict (no other site's page sends it).
// `secure`: served over HTTPS, so the browser never sends it over plain HTTP.
std::string sign_in_cookie(std::string_view token, bool secure = false);

// A token is 16 to 256 visible ASCII characters, none of which needs quoting in a cookie.
bool valid_token(std::string_view token);

} // namespace collector
