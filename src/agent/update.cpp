#include "agent/update.hpp"

#include "agent/build_arch.hpp"
#include "protocol/pairing.hpp"
#include "protocol/tls.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace agent {
namespace fs = std::filesystem;

namespace {

bool is_hex64(std::string_view s) {
    return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string errno_text(const std::string& what) {
    return what + ": " + std::strerror(errno);
}

} // namespace

std::variant<std::unique_ptr<update_receiver>, std::string>
update_receiver::begin(const update_offer& offer, const fs::path& self,
                       const std::optional<std::string>& public_key, bool pinned,
                       std::string_view running) {
    if (!public_key && !pinned)
        return std::string("refused: this agent takes updates signed for its --update-pubkey "
                           "(the key perfwire-collector --agent-update-key prints), or over a "
                           "TLS link to a collector it pinned (--tls-pin); it has neither");
    if (offer.arch != build_arch)
        return "wrong architecture: this agent is built for " + std::string(build_arch) +
               ", the offered build for " + offer.arch;
    if (!is_hex64(offer.sha256))
        return std::string("sha256 must be 64 lowercase hex characters");
    if (offer.size == 0 || offer.size > max_update_size)
        return "size must be 1 to " + std::to_string(max_update_size) + " bytes";
    if (!protocol::update_version(offer.version))
        return std::string("version must be dotted numbers (1 to 64 characters, each number at "
                           "most 18 digits)");
    if (public_key && offer.signature.empty())
        return std::string("this agent takes only signed updates (--update-pubkey): the offer "
                           "has no signature");
    if (public_key &&
        !protocol::tls::verify(*public_key, protocol::update_signed_text(offer), offer.signature))
        return std::string("bad signature: the offer (architecture, version, size, sha256) is "
                           "not signed by the key of this agent's --update-pubkey");
    if (!protocol::later_version(offer.version, running))
        return "refused: version " + offer.version + " is not later than this agent's " +
               std::string(running);
    if (self.empty())
        return std::string("this agent does not know its own executable's path");
    // Beside the executable, so the final rename stays on one file system; a name of its own,
    // so no other offer can replace the file this one checks and renames. Files of earlier
    // offers go (one that died midway, or one still under way, which then fails to rename).
    const std::string prefix = "." + self.filename().string() + ".update-";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(self.parent_path(), ec))
        if (e.path().filename().string().starts_with(prefix))
            ::unlink(e.path().c_str());
    static unsigned offers = 0;
    const auto file =
        self.parent_path() / (prefix + std::to_string(::getpid()) + "-" + std::to_string(++offers));
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0700);
    if (fd < 0)
        return errno_text("cannot create " + file.string());
    return std::unique_ptr<update_receiver>(new update_receiver(offer, self, file, fd));
}

update_receiver::update_receiver(update_offer offer, fs::path self, fs::path file, int fd)
    : offer_(std::move(offer))
    , self_(std::move(self))
    , file_(std::move(file))
    , fd_(fd) {}

update_receiver::~update_receiver() {
    if (fd_ >= 0)
        ::close(fd_);
    if (!installed_)
        ::unlink(file_.c_str());
}

std::string update_receiver::write(std::uint64_t offset, std::string_view bytes) {
    if (fd_ < 0)
        return "the update is already complete";
    if (offset != received_)
        return "expected the piece at offset " + std::to_string(received_) + ", got " +
               std::to_string(offset);
    if (bytes.size() > offer_.size - received_)
        return "more bytes than the offered " + std::to_string(offer_.size);
    for (std::size_t done = 0; done < bytes.size();) {
        const auto n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno_text("cannot write " + file_.string()); // ENOSPC: disk full
        }
        done += static_cast<std::size_t>(n);
    }
    hash_.update(bytes);
    received_ += bytes.size();
    return {};
}

std::string update_receiver::finish() {
    if (fd_ < 0)
        return "the update is already complete";
    if (received_ != offer_.size)
        return "received " + std::to_string(received_) + " of " + std::to_string(offer_.size) +
               " bytes";
    const auto sum = hash_.finish_hex();
    if (!protocol::constant_time_equal(offer_.sha256, sum))
        return "checksum mismatch: the offer says sha256 " + offer_.sha256 + ", the bytes are " +
               sum;
    if (::fsync(fd_) != 0 || ::fchmod(fd_, 0755) != 0)
        return errno_text("cannot finish " + file_.string());
    ::close(fd_);
    fd_ = -1;
    return {};
}

std::string update_receiver::install() {
    if (fd_ >= 0)
        return "the update is not complete";
    if (::rename(file_.c_str(), self_.c_str()) != 0)
        return errno_text("cannot replace " + self_.string());
    installed_ = true;
    // The rename is durable once the folder is.
    if (const int dir = ::open(self_.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        dir >= 0) {
        ::fsync(dir);
        ::close(dir);
    }
    return {};
}

fs::path own_executable() {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::path() : p;
}

} // namespace agent
