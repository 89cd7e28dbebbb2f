#include "protocol/tls.hpp"

#include "protocol/digest.hpp"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>

namespace protocol::tls {
namespace {

struct free_pkey {
    void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct free_x509 {
    void operator()(X509* p) const { X509_free(p); }
};
struct free_bio {
    void operator()(BIO* p) const { BIO_free(p); }
};
struct free_md_ctx {
    void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, free_pkey>;
using x509_ptr = std::unique_ptr<X509, free_x509>;
using bio_ptr = std::unique_ptr<BIO, free_bio>;
using md_ctx_ptr = std::unique_ptr<EVP_MD_CTX, free_md_ctx>;

// OpenSSL's last error, for a message.
std::string openssl_error() {
    const unsigned long e = ERR_get_error();
    ERR_clear_error();
    if (e == 0)
        return "unknown OpenSSL error";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    return buf;
}

[[noreturn]] void fail(const std::string& what) {
    throw std::runtime_error(what + ": " + openssl_error());
}

std::string bio_text(BIO* b) {
    char* data = nullptr;
    const long n = BIO_get_mem_data(b, &data);
    return n > 0 ? std::string(data, static_cast<std::size_t>(n)) : std::string();
}

bio_ptr memory_bio(std::string_view text) {
    bio_ptr b(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
    if (!b)
        fail("BIO_new_mem_buf");
    return b;
}

std::string pem_of_key(EVP_PKEY* key) {
    bio_ptr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_PrivateKey(b.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
        fail("writing a private key");
    return bio_text(b.get());
}

std::string der_of(X509* cert) {
    const int n = i2d_X509(cert, nullptr);
    if (n <= 0)
        fail("encoding a certificate");
    std::string der(static_cast<std::size_t>(n), '\0');
    auto* p = reinterpret_cast<unsigned char*>(der.data());
    i2d_X509(cert, &p);
    return der;
}

std::optional<std::string> read_file(const std::filesystem::path& p, std::string& error) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
        error = "cannot read " + p.string() + ": " + std::strerror(errno);
        return std::nullopt;
    }
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.size() > (1 << 20)) {
        error = p.string() + " is too large for a key or a certificate";
        return std::nullopt;
    }
    return text;
}

// Written whole or not at all, readable by the owner only.
std::string write_private(const std::filesystem::path& p, std::string_view text) {
    std::error_code ec;
    if (p.has_parent_path() && !std::filesystem::exists(p.parent_path(), ec)) {
        std::filesystem::create_directories(p.parent_path(), ec);
        if (ec)
            return "cannot make " + p.parent_path().string() + ": " + ec.message();
        ::chmod(p.parent_path().c_str(), 0700);
    }
    // A fresh file of its own: never one planted there (a link to elsewhere) before.
    const auto temp = p.string() + ".new";
    ::unlink(temp.c_str());
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return "cannot write " + temp + ": " + std::strerror(errno);
    bool ok = ::fchmod(fd, 0600) == 0;
    for (std::size_t at = 0; ok && at < text.size();) {
        const auto n = ::write(fd, text.data() + at, text.size() - at);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        at += ok ? static_cast<std::size_t>(n) : 0;
    }
    ok = ok && ::fsync(fd) == 0;
    const int saved = errno;
    ::close(fd);
    if (!ok || ::rename(temp.c_str(), p.c_str()) != 0) {
        const auto why = std::strerror(ok ? errno : saved);
        ::unlink(temp.c_str());
        return "cannot write " + p.string() + ": " + why;
    }
    return {};
}

identity identity_of(X509* cert, std::string key_pem) {
    bio_ptr b(BIO_new(BIO_s_mem()));
    if (!b || PEM_write_bio_X509(b.get(), cert) != 1)
        fail("writing a certificate");
    return {bio_text(b.get()), std::move(key_pem), pin_of_der(der_of(cert))};
}

} // namespace

std::string pin_of_der(std::string_view der) {
    return "sha256:" + sha256_hex(der);
}

std::optional<std::string> parse_pin(std::string_view text) {
    constexpr std::string_view scheme = "sha256:";
    if (text.size() < scheme.size())
        return std::nullopt;
    for (std::size_t i = 0; i < scheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(text[i])) != scheme[i])
            return std::nullopt;
    std::string digits;
    for (const char c : text.substr(scheme.size())) {
        if (c == ':')
            continue;
        if (!std::isxdigit(static_cast<unsigned char>(c)) || digits.size() == 64)
            return std::nullopt;
        digits.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    if (digits.size() != 64)
        return std::nullopt;
    return std::string(scheme) + digits;
}

identity make_identity(std::string_view common_name) {
    pkey_ptr key(EVP_EC_gen("P-256"));
    if (!key)
        fail("making a P-256 key");
    x509_ptr cert(X509_new());
    if (!cert)
        fail("X509_new");
    X509_set_version(cert.get(), 2);
    unsigned char serial[16];
    if (RAND_bytes(serial, sizeof serial) != 1)
        fail("RAND_bytes");
    serial[0] &= 0x7f; // positive
    std::unique_ptr<BIGNUM, decltype(&BN_free)> bn(BN_bin2bn(serial, sizeof serial, nullptr),
                                                   BN_free);
    if (!bn || !BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())))
        fail("a certificate serial");
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), 20L * 365 * 24 * 3600);
    X509_set_pubkey(cert.get(), key.get());
    X509_NAME* name = X509_get_subject_name(cert.get());
    const std::string cn(common_name.substr(0, 64));
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    X509_set_issuer_name(cert.get(), name);
    if (X509_sign(cert.get(), key.get(), EVP_sha256()) <= 0)
        fail("signing a certificate");
    return identity_of(cert.get(), pem_of_key(key.get()));
}

std::variant<identity, std::string> load_identity(const std::filesystem::path& cert_file,
                                                  const std::filesystem::path& key_file, bool make,
                                                  std::string_view common_name) {
    std::error_code ec;
    const bool have_cert = std::filesystem::exists(cert_file, ec);
    const bool have_key = std::filesystem::exists(key_file, ec);
    if (make && !have_cert && !have_key) {
        auto made = make_identity(common_name);
        if (cert_file == key_file) { // one file holds both
            if (auto why = write_private(key_file, made.key_pem + made.cert_pem); !why.empty())
                return why;
            return made;
        }
        // The key first: a certificate without its key is never left alone.
        if (auto why = write_private(key_file, made.key_pem); !why.empty())
            return why;
        if (auto why = write_private(cert_file, made.cert_pem); !why.empty())
            return why;
        return made;
    }
    std::string error;
    const auto cert_text = read_file(cert_file, error);
    if (!cert_text)
        return error;
    const auto key_text = read_file(key_file, error);
    if (!key_text)
        return error;
    auto cb = memory_bio(*cert_text);
    x509_ptr cert(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
    if (!cert)
        return cert_file.string() + " holds no PEM certificate: " + openssl_error();
    auto kb = memory_bio(*key_text);
    pkey_ptr key(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
    if (!key)
        return key_file.string() +
               " holds no PEM private key (an encrypted one is not read): " + openssl_error();
    if (X509_check_private_key(cert.get(), key.get()) != 1) {
        ERR_clear_error();
        return key_file.string() + " is not the key of the certificate in " + cert_file.string();
    }
    // The chain as given (a leaf and its intermediates, for a CA check), pinned by its leaf;
    // only its certificates (the file may hold the key too).
    auto id = identity_of(cert.get(), *key_text);
    constexpr std::string_view begin = "-----BEGIN CERTIFICATE-----",
                               end = "-----END CERTIFICATE-----";
    std::string chain;
    for (auto at = cert_text->find(begin); at != std::string::npos;
         at = cert_text->find(begin, at + 1)) {
        const auto stop = cert_text->find(end, at);
        if (stop == std::string::npos)
            break;
        chain += cert_text->substr(at, stop + end.size() - at) + "\n";
    }
    if (!chain.empty())
        id.cert_pem = std::move(chain);
    return id;
}

std::variant<signing_key, std::string> load_signing_key(const std::filesystem::path& file,
                                                        bool make) {
    std::error_code ec;
    pkey_ptr key;
    std::string pem;
    if (make && !std::filesystem::exists(file, ec)) {
        key.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"));
        if (!key)
            fail("making an Ed25519 key");
        pem = pem_of_key(key.get());
        if (auto why = write_private(file, pem); !why.empty())
            return why;
    } else {
        std::string error;
        auto text = read_file(file, error);
        if (!text)
            return error;
        pem = std::move(*text);
        auto b = memory_bio(pem);
        key.reset(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
        if (!key)
            return file.string() + " holds no PEM private key: " + openssl_error();
        if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519)
            return file.string() + " is not an Ed25519 key";
    }
    unsigned char raw[32];
    std::size_t n = sizeof raw;
    if (EVP_PKEY_get_raw_public_key(key.get(), raw, &n) != 1 || n != 32)
        fail("reading an Ed25519 public key");
    return signing_key{std::move(pem), "ed25519:" + base64_encode(std::string_view(
                                                        reinterpret_cast<const char*>(raw), n))};
}

namespace {

// The 32 bytes after "ed25519:", the text trimmed; nothing when they are not.
std::optional<std::string> public_key_bytes(std::string_view& text) {
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
    constexpr std::string_view scheme = "ed25519:";
    if (!text.starts_with(scheme))
        return std::nullopt;
    auto raw = base64_decode(text.substr(scheme.size()));
    if (!raw || raw->size() != 32)
        return std::nullopt;
    return raw;
}

// A point's y (little-endian, the sign of x in the top bit): those of small order are y = 0
// (order 4), 1 (the identity), p - 1 (order 2), the two of order 8, and p and p + 1 (0 and 1
// written without reduction), p = 2^255 - 19. Compared with the sign bit cleared.
bool small_order(const std::string& raw) {
    static constexpr unsigned char order_8[2][32] = {
        {0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4,
         0x89, 0xf2, 0xef, 0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6,
         0x33, 0x39, 0xb1, 0x38, 0x02, 0x88, 0x6d, 0x53, 0xfc, 0x05},
        {0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b,
         0x76, 0x0d, 0x10, 0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39,
         0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77, 0x92, 0xac, 0x03, 0x7a}};
    std::array<unsigned char, 32> y{};
    std::memcpy(y.data(), raw.data(), 32);
    y[31] &= 0x7f;
    for (const auto& point : order_8)
        if (std::memcmp(y.data(), point, 32) == 0)
            return true;
    // 0, 1: the first byte, then zeros.
    if (y[0] <= 1 && std::all_of(y.begin() + 1, y.end(), [](unsigned char b) { return b == 0; }))
        return true;
    // p - 1, p, p + 1: 0xec, 0xed, 0xee, then 0xff up to a last 0x7f.
    return y[0] >= 0xec && y[0] <= 0xee && y[31] == 0x7f &&
           std::all_of(y.begin() + 1, y.end() - 1, [](unsigned char b) { return b == 0xff; });
}

} // namespace

std::optional<std::string> parse_public_key(std::string_view text) {
    const auto raw = public_key_bytes(text);
    if (!raw || small_order(*raw))
        return std::nullopt;
    return std::string(text);
}

bool weak_public_key(std::string_view text) {
    const auto raw = public_key_bytes(text);
    return raw && small_order(*raw);
}

std::string sign(const signing_key& key, std::string_view message) {
    auto b = memory_bio(key.private_pem);
    pkey_ptr pkey(PEM_read_bio_PrivateKey(b.get(), nullptr, nullptr, nullptr));
    md_ctx_ptr ctx(EVP_MD_CTX_new());
    if (!pkey || !ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1)
        fail("Ed25519 signing");
    unsigned char sig[64];
    std::size_t n = sizeof sig;
    if (EVP_DigestSign(ctx.get(), sig, &n, reinterpret_cast<const unsigned char*>(message.data()),
                       message.size()) != 1)
        fail("Ed25519 signing");
    return base64_encode(std::string_view(reinterpret_cast<const char*>(sig), n));
}

bool verify(std::string_view public_key, std::string_view message, std::string_view signature) {
    const auto key = parse_public_key(public_key);
    const auto sig = base64_decode(signature);
    if (!key || !sig || sig->size() != 64)
        return false;
    const auto raw = *base64_decode(std::string_view(*key).substr(8));
    pkey_ptr pkey(EVP_PKEY_new_raw_public_key(
        EVP_PKEY_ED25519, nullptr, reinterpret_cast<const unsigned char*>(raw.data()), raw.size()));
    md_ctx_ptr ctx(EVP_MD_CTX_new());
    if (!pkey || !ctx ||
        EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, pkey.get()) != 1) {
        ERR_clear_error();
        return false;
    }
    const bool ok =
        EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(sig->data()),
                         sig->size(), reinterpret_cast<const unsigned char*>(message.data()),
                         message.size()) == 1;
    ERR_clear_error();
    return ok;
}

} // namespace protocol::tls
