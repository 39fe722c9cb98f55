#include "kube/watch.h"

#include <fmt/format.h>

#include "error.h"
#include "json_parse.h"

namespace trainctl::kube {

std::string_view to_string(WatchEventType type) {
  switch (type) {
    case WatchEventType::Added:
      return "ADDED";
    case WatchEventType::Modified:
      return "MODIFIED";
    case WatchEventType::Deleted:
      return "DELETED";
    case WatchEventType::Bookmark:
      return "BOOKMARK";
    case WatchEventType::Error:
      return "ERROR";
  }
  return "UNKNOWN";
}

namespace {

WatchEventType parse_type(std::string_view s) {
  if (s == "ADDED")
    return WatchEventType::Added;
  if (s == "MODIFIED")
    return WatchEventType::Modified;
  if (s == "DELETED")
    return WatchEventType::Deleted;
  if (s == "BOOKMARK")
    return WatchEventType::Bookmark;
  if (s == "ERROR")
    return WatchEventType::Error;
  throw Error(ErrorKind::Protocol, fmt::format("watch event has unknown type {:?}", s));
}

}  // namespace

WatchEvent parse_watch_event(std::string_view line) {
  nlohmann::json doc = parse_json(line, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    throw Error(ErrorKind::Protocol,
                fmt::format("watch event is not a JSON object: {:?}", line.substr(0, 80)));
  }
  auto type = doc.find("type");
  auto object = doc.find("object");
  if (type == doc.end() || !type->is_string() || object == doc.end() || !object->is_object()) {
    throw Error(ErrorKind::Protocol, "watch event lacks a string \"type\" and an \"object\"");
  }
  return WatchEvent{parse_type(type->get_ref<const std::string&>()), std::move(*object)};
}

void WatchDecoder::feed(std::string_view chunk) {
  if (consumed_ > 0 && consumed_ >= buffer_.size() / 2) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  buffer_.append(chunk);
}

std::optional<WatchEvent> WatchDecoder::next() {
  while (true) {
    const auto newline = buffer_.find('\n', consumed_);
    if (newline == std::string::npos)
      return std::nullopt;
    std::string_view line(buffer_.data() + consumed_, newline - consumed_);
    consumed_ = newline + 1;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' '))
      line.remove_suffix(1);
    if (line.empty())
      continue;  // keep-alive blank lines
    try {
      WatchEvent event = parse_watch_event(line);
      ++events_decoded_;
      return event;
    } catch (const Error& e) {
      throw Error(ErrorKind::Protocol,
                  fmt::format("watch stream event #{}: {}", events_decoded_ + 1, e.message()));
    }
  }
}

}  // namespace trainctl::kube
