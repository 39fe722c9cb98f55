#include "kube/tls_sessions.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <filesystem>
#include <memory>
#include <mutex>

#include "openssl_handles.h"
#include "sha256.h"

namespace trainctl::kube {
namespace {

using SessionPtr = std::unique_ptr<SSL_SESSION, OpenSslFree<SSL_SESSION_free>>;

/// Whether `session` may still be offered: resumable and not expired.
bool usable(const SSL_SESSION* session) {
  return session != nullptr && SSL_SESSION_is_resumable(session) == 1 &&
         SSL_SESSION_get_time(session) + SSL_SESSION_get_timeout(session) > std::time(nullptr);
}

/// What an SSL_CTX set up by keep_tls_sessions carries (it owns it, as ex_data).
struct SessionSlot {
  std::string file;
  /// The session to offer: read from `file` once (decoding one parses the server's certificate
  /// chain), then the newest the server gave. Shared by the connections of one SSL_CTX (all of
  /// a direct transport's).
  std::mutex mu;
  bool read = false;
  SessionPtr newest;
};

constexpr std::size_t kLargestSession = 16 * 1024;  // a ticket and the server's chain

void free_slot(void*, void* slot, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<SessionSlot*>(slot);
}

int slot_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, free_slot);
  return index;
}

SessionSlot* slot_of(const SSL* ssl) {
  return static_cast<SessionSlot*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), slot_index()));
}

/// The session kept in `file`, if it is ours alone, readable and still resumable.
SessionPtr load(const std::string& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return nullptr;
  std::string der;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      (st.st_mode & 077) == 0 && static_cast<std::size_t>(st.st_size) <= kLargestSession) {
    der.resize(static_cast<std::size_t>(st.st_size));
    if (::read(fd, der.data(), der.size()) != st.st_size)
      der.clear();
  }
  ::close(fd);
  const auto* bytes = reinterpret_cast<const unsigned char*>(der.data());
  SessionPtr session(der.empty() ? nullptr
                                 : d2i_SSL_SESSION(nullptr, &bytes, static_cast<long>(der.size())));
  ERR_clear_error();
  return usable(session.get()) ? std::move(session) : nullptr;
}

/// Replaces `file` with `session`, atomically (concurrent commands each read a whole one).
void store(const std::string& file, SSL_SESSION* session) {
  if (SSL_SESSION_is_resumable(session) != 1)
    return;
  const int size = i2d_SSL_SESSION(session, nullptr);
  if (size <= 0 || static_cast<std::size_t>(size) > kLargestSession)
    return;
  std::string der(static_cast<std::size_t>(size), '\0');
  auto* out = reinterpret_cast<unsigned char*>(der.data());
  i2d_SSL_SESSION(session, &out);

  const std::filesystem::path dir = std::filesystem::path(file).parent_path();
  std::error_code ignored;
  if (std::filesystem::create_directories(dir, ignored))
    ::chmod(dir.c_str(), 0700);
  static std::atomic<unsigned> sequence{0};
  const std::string temporary = fmt::format("{}.{}.{}.tmp", file, ::getpid(), sequence++);
  const int fd =
      ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    return;
  const bool written = ::write(fd, der.data(), der.size()) == static_cast<ssize_t>(der.size());
  if (::close(fd) != 0 || !written || ::rename(temporary.c_str(), file.c_str()) != 0)
    ::unlink(temporary.c_str());
}

int on_new_session(SSL* ssl, SSL_SESSION* session) {
  SessionSlot* slot = slot_of(ssl);
  if (slot == nullptr)
    return 0;
  store(slot->file, session);
  // A copy: OpenSSL marks the connection's own object not resumable when the connection ends
  // without a close_notify.
  if (SessionPtr copy(SSL_SESSION_dup(session)); copy) {
    const std::lock_guard lock(slot->mu);
    slot->newest = std::move(copy);
    slot->read = true;
  }
  return 0;
}

/// At the start of the handshake, before the ClientHello is written: offers the kept session
/// unless the connection already has one.
void on_info(const SSL* ssl, int where, int) {
  if ((where & SSL_CB_HANDSHAKE_START) == 0 || SSL_get_session(ssl) != nullptr)
    return;
  SessionSlot* slot = slot_of(ssl);
  if (slot == nullptr)
    return;
  const std::lock_guard lock(slot->mu);
  if (!slot->read) {
    slot->newest = load(slot->file);
    slot->read = true;
  }
  if (usable(slot->newest.get()))
    SSL_set_session(const_cast<SSL*>(ssl), slot->newest.get());  // takes its own reference
}

}  // namespace

std::string tls_session_file(const std::string& dir, const TlsSessionKey& key) {
  std::string identity;
  for (std::string_view part : {key.server, key.server_name, key.ca_pem, key.client_cert_pem}) {
    identity += part;
    identity += '\0';
  }
  return fmt::format("{}/{}", dir, sha256_hex(identity));
}

void keep_tls_sessions(SSL_CTX* ctx, const std::string& file) {
  auto slot = std::make_unique<SessionSlot>();
  slot->file = file;
  if (SSL_CTX_set_ex_data(ctx, slot_index(), slot.get()) != 1)
    return;
  slot.release();
  // Sessions reach the new-session callback; none is kept inside OpenSSL.
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_sess_set_new_cb(ctx, on_new_session);
  SSL_CTX_set_info_callback(ctx, on_info);
}

}  // namespace trainctl::kube
