// Keys for the agent link, through OpenSSL, without a PKI (docs/security.md):
//
//   - a TLS identity: an ECDSA P-256 key and a self-signed certificate, both PEM. Its pin is
//     "sha256:" and the SHA-256 of the certificate's DER in hex (what `openssl x509
//     -fingerprint -sha256` prints, without the colons): the peer that pinned it takes no
//     other certificate, whatever it is signed by;
//   - an update signing key: Ed25519, its private half on the collector only; the agent holds
//     the public half as "ed25519:" and the 32 bytes in base64.
//
// No Asio here (link_stream.hpp has the stream); this header is safe to include anywhere.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace protocol::tls {

struct identity {
    std::string cert_pem, key_pem;
    std::string pin; // "sha256:<64 lowercase hex>" of the certificate
};

// A fresh key and a self-signed certificate naming `common_name`, valid for 20 years.
identity make_identity(std::string_view common_name);
// The identity in `cert`/`key` (PEM files). With `make`, both missing: made, and written with
// mode 0600 (their folder 0700 when it is made). `cert` and `key` may be one file holding both.
// An error message otherwise (unreadable, not a matching pair, only one of them there).
std::variant<identity, std::string> load_identity(const std::filesystem::path& cert,
                                                  const std::filesystem::path& key, bool make,
                                                  std::string_view common_name);

// "sha256:<hex>" of a certificate's DER bytes.
std::string pin_of_der(std::string_view der);
// A pin as the user typed it: "sha256:" then 64 hex digits, any case, colons between bytes
// allowed (as openssl prints it); normalised to lowercase without colons. Nothing otherwise.
std::optional<std::string> parse_pin(std::string_view text);

struct signing_key {
    std::string private_pem;
    std::string public_key; // "ed25519:<base64 of the 32 bytes>"
};
// The Ed25519 key in `file` (PEM); made and written 0600 when missing and `make`.
std::variant<signing_key, std::string> load_signing_key(const std::filesystem::path& file,
                                                        bool make);
// "ed25519:<base64>" as the user gave it (the text of a file, or the value itself); nothing
// when it is not 32 bytes of canonical base64 after "ed25519:", or is a weak key.
std::optional<std::string> parse_public_key(std::string_view text);
// Whether `text` is "ed25519:" and 32 bytes that encode a point of small order (the identity
// and the points of order 2, 4 and 8, in any of their encodings): a signature made without
// any private key verifies under such a key, so it is never taken as one.
bool weak_public_key(std::string_view text);
// The signature of `message` under `key` (base64 of 64 bytes).
std::string sign(const signing_key& key, std::string_view message);
// Whether `signature` (base64) is `public_key`'s over `message`.
bool verify(std::string_view public_key, std::string_view message, std::string_view signature);

} // namespace protocol::tls
