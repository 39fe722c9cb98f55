#pragma once

#include <cstddef>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace trainctl::kube {

enum class WatchEventType { Added, Modified, Deleted, Bookmark, Error };

std::string_view to_string(WatchEventType type);

/// One event of a watch stream. For Error, `object` is a metav1.Status.
struct WatchEvent {
  WatchEventType type;
  nlohmann::json object;
};

/// Splits a watch response body (newline-delimited JSON, arriving in arbitrary chunks) into
/// events. Malformed lines raise ErrorKind::Protocol naming the event's position in the stream.
class WatchDecoder {
 public:
  void feed(std::string_view chunk);
  std::optional<WatchEvent> next();
  /// Bytes received that do not yet form a whole line.
  std::size_t pending_bytes() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  std::size_t consumed_ = 0;
  std::size_t events_decoded_ = 0;
};

/// Decodes one line of a watch stream.
WatchEvent parse_watch_event(std::string_view line);

}  // namespace trainctl::kube
