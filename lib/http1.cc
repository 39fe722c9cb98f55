#include "http1.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "error.h"
#include "text.h"

namespace trainctl {

bool is_token_char(char c) {
  if (std::isalnum(static_cast<unsigned char>(c)))
    return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char);
}

bool is_field_value(std::string_view s) {
  return std::none_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && c != '\t') || u == 0x7f;
  });
}

bool has_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    if (to_lower(trim(value.substr(0, comma))) == token)
      return true;
    if (comma == std::string_view::npos)
      break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

std::size_t find_head_end(std::string_view buffer) {
  for (std::size_t at = buffer.find('\n'); at != std::string_view::npos;
       at = buffer.find('\n', at + 1)) {
    if (at + 1 < buffer.size() && buffer[at + 1] == '\n')
      return at + 2;
    if (at + 2 < buffer.size() && buffer[at + 1] == '\r' && buffer[at + 2] == '\n')
      return at + 3;
  }
  return std::string_view::npos;
}

std::string_view next_line(std::string_view text, std::size_t& pos) {
  std::size_t end = text.find('\n', pos);
  if (end == std::string_view::npos)
    end = text.size();
  std::string_view line = text.substr(pos, end - pos);
  pos = end + 1;
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  return line;
}

bool MessageReader::read_head(std::string& head) {
  std::size_t end;
  while (true) {
    const std::size_t start = buffer_.find_first_not_of("\r\n");
    buffer_.erase(0, start == std::string::npos ? buffer_.size() : start);
    end = find_head_end(buffer_);
    if (end != std::string::npos)
      break;
    if (buffer_.size() >= kMaxHead)
      throw HttpFailure{431, fmt::format("the message head is over {} bytes", kMaxHead)};
    if (buffer_.empty()) {
      try {
        if (!fill())
          return false;
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::Timeout)
          throw;
        idled_out_ = true;  // an idle keep-alive connection
        return false;
      }
    } else if (!fill()) {
      throw Error(ErrorKind::Connection, "the connection closed within a message head");
    }
  }
  if (end > kMaxHead)
    throw HttpFailure{431, fmt::format("the message head is over {} bytes", kMaxHead)};
  head.assign(buffer_, 0, end);
  buffer_.erase(0, end);
  return true;
}

bool MessageReader::read_body(const BodyFraming& framing, std::size_t max_body, const Sink& sink) {
  if (framing.to_end) {
    while (true) {
      if (!buffer_.empty()) {
        std::string piece;
        piece.swap(buffer_);
        if (!sink(piece))
          return false;
      }
      if (!fill())
        return true;
    }
  }
  if (!framing.chunked) {
    need(framing.length);
    const bool more = sink(std::string_view(buffer_).substr(0, framing.length));
    buffer_.erase(0, framing.length);
    return more;
  }
  std::size_t total = 0;
  while (true) {
    const std::string line = read_line(kMaxChunkLine, "chunk size line");
    const std::string_view size_text = trim(std::string_view(line).substr(0, line.find(';')));
    std::size_t size = 0;
    const auto [ptr, ec] =
        std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
    if (size_text.empty() || size_text.size() > 15 || ec != std::errc() ||
        ptr != size_text.data() + size_text.size()) {
      throw HttpFailure{400, "malformed chunk size"};
    }
    if (size == 0)
      break;
    total += size;
    if (total > max_body)
      throw HttpFailure{413, fmt::format("the body is over the limit of {} bytes", max_body)};
    // A large chunk goes to the sink as it arrives, not once whole.
    std::size_t left = size;
    while (left > 0) {
      if (buffer_.empty() && !fill())
        throw Error(ErrorKind::Connection, "the connection closed within a message body");
      const std::size_t n = std::min(left, buffer_.size());
      const bool more = sink(std::string_view(buffer_).substr(0, n));
      buffer_.erase(0, n);
      left -= n;
      if (!more)
        return false;
    }
    if (!read_line(2, "chunk end").empty())
      throw HttpFailure{400, "chunk data longer than its size"};
  }
  // Trailer fields are read and dropped.
  std::size_t trailers = 0;
  while (true) {
    const std::string line = read_line(kMaxHead, "trailer");
    if (line.empty())
      break;
    trailers += line.size();
    if (trailers > kMaxHead)
      throw HttpFailure{431, "the trailer fields are too large"};
  }
  return true;
}

bool MessageReader::fill() {
  char buf[kReadSize];
  const std::size_t n = read_(buf, sizeof buf);
  buffer_.append(buf, n);
  return n > 0;
}

void MessageReader::need(std::size_t n) {
  while (buffer_.size() < n) {
    if (!fill())
      throw Error(ErrorKind::Connection, "the connection closed within a message body");
  }
}

std::string MessageReader::read_line(std::size_t limit, std::string_view what) {
  std::size_t eol;
  while ((eol = buffer_.find('\n')) == std::string::npos) {
    if (buffer_.size() > limit + 1)
      throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
    if (!fill())
      throw Error(ErrorKind::Connection, "the connection closed within a message body");
  }
  if (eol > limit + 1)
    throw HttpFailure{400, fmt::format("malformed chunked body: {} too long", what)};
  std::string line = buffer_.substr(0, eol);
  buffer_.erase(0, eol + 1);
  if (!line.empty() && line.back() == '\r')
    line.pop_back();
  return line;
}

}  // namespace trainctl
