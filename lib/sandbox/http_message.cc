// HTTP/1.1 messages: parsing requests (head, target, query, body framing) and the text of
// responses.

#include "sandbox/http_message.h"

#include "http_status.h"

namespace trainctl::sandbox {

std::string_view status_reason(int status) {
  switch (status) {
    case 400:
      return "BadRequest";
    case 413:
      return "RequestEntityTooLarge";
    case 417:
      return "ExpectationFailed";
    case 431:
      return "RequestHeaderFieldsTooLarge";
    case 501:
      return "NotImplemented";
    case 505:
      return "HTTPVersionNotSupported";
    default:
      return "InternalError";
  }
}

std::string status_body(int status, std::string_view message) {
  nlohmann::ordered_json body = {
      {"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", message}, {"reason", status_reason(status)},
      {"code", status}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string http_date() {
  static constexpr const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static constexpr const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  gmtime_r(&now, &t);
  return fmt::format("{}, {:02} {} {} {:02}:{:02}:{:02} GMT", kDays[t.tm_wday], t.tm_mday,
                     kMonths[t.tm_mon], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
}

bool is_framing_header(std::string_view lower_name) {
  return lower_name == "content-length" || lower_name == "transfer-encoding";
}

bool check_extra_headers(const HeaderList& headers) {
  bool close = false;
  for (const auto& [name, value] : headers) {
    if (!is_token(name) || !is_field_value(value))
      throw std::invalid_argument(fmt::format("invalid response header {:?}", name));
    if (to_lower(name) == "connection" && has_token(value, "close"))
      close = true;
  }
  return close;
}

void append_extra_headers(std::string& out, const HeaderList& headers) {
  for (const auto& [name, value] : headers) {
    const std::string lower = to_lower(name);
    if (is_framing_header(lower) || lower == "connection")
      continue;
    fmt::format_to(std::back_inserter(out), "{}: {}\r\n", name, value);
  }
}

void parse_target(std::string_view target, Request& req) {
  if (target.empty() || !is_field_value(target) || target.find(' ') != std::string_view::npos)
    throw HttpFailure{400, "malformed request target"};
  req.target = std::string(target);
  std::string_view origin = target;
  // The absolute form (RFC 9112 §3.2.2), as sent to proxies: keep only path and query.
  for (std::string_view scheme : {"http://", "https://"}) {
    if (to_lower(origin.substr(0, scheme.size())) == scheme) {
      origin.remove_prefix(scheme.size());
      const std::size_t slash = origin.find_first_of("/?");
      origin = slash == std::string_view::npos ? std::string_view("/") : origin.substr(slash);
      break;
    }
  }
  if (origin == "*" && req.method == "OPTIONS") {
    req.path = "*";
    return;
  }
  if (origin.empty() || (origin.front() != '/' && origin.front() != '?'))
    throw HttpFailure{400, "malformed request target"};
  const std::size_t question = origin.find('?');
  req.path = std::string(origin.substr(0, question));
  if (req.path.empty())
    req.path = "/";
  if (question != std::string_view::npos) {
    req.query = std::string(origin.substr(question + 1));
    req.params = parse_query(req.query);
  }
}

void parse_head(std::string_view head, Request& req) {
  std::size_t pos = 0;
  const std::string_view line = next_line(head, pos);
  const std::size_t sp1 = line.find(' ');
  const std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos)
    throw HttpFailure{400, "malformed request line"};
  req.method = std::string(line.substr(0, sp1));
  if (!is_token(req.method))
    throw HttpFailure{400, "malformed request method"};
  const std::string_view version = line.substr(sp2 + 1);
  if (version.size() != 8 || version.substr(0, 5) != "HTTP/" || !std::isdigit(version[5]) ||
      version[6] != '.' || !std::isdigit(version[7])) {
    throw HttpFailure{400, "malformed HTTP version"};
  }
  if (version[5] != '1')
    throw HttpFailure{505, fmt::format("{} is not supported", version)};
  req.http_minor = version[7] - '0';
  parse_target(line.substr(sp1 + 1, sp2 - sp1 - 1), req);

  while (pos < head.size()) {
    const std::string_view field = next_line(head, pos);
    if (field.empty())
      break;
    if (field.front() == ' ' || field.front() == '\t')
      throw HttpFailure{400, "obsolete line folding in a header"};
    const std::size_t colon = field.find(':');
    const std::string_view name = field.substr(0, colon);
    if (colon == std::string_view::npos || !is_token(name))
      throw HttpFailure{400, "malformed header line"};
    const std::string_view value = trim(field.substr(colon + 1));
    if (!is_field_value(value))
      throw HttpFailure{400, fmt::format("invalid characters in header {}", name)};
    std::string lower = to_lower(name);
    auto [it, inserted] = req.headers.emplace(lower, value);
    if (!inserted)
      it->second.append(", ").append(value);
    req.header_fields.emplace_back(std::move(lower), std::string(value));
  }
  if (req.http_minor >= 1 && req.header_values("host").size() != 1)
    throw HttpFailure{400, "missing required Host header"};
}

BodyFraming body_framing(const Request& req, std::size_t max_body) {
  BodyFraming framing;
  const bool has_length = req.headers.contains("content-length");
  if (auto te = req.headers.find("transfer-encoding"); te != req.headers.end()) {
    if (has_length)
      throw HttpFailure{400, "both Transfer-Encoding and Content-Length"};
    if (req.http_minor == 0)
      throw HttpFailure{400, "Transfer-Encoding in an HTTP/1.0 request"};
    if (to_lower(trim(te->second)) != "chunked")
      throw HttpFailure{501, fmt::format("unsupported Transfer-Encoding {:?}", te->second)};
    framing.chunked = true;
    return framing;
  }
  if (!has_length)
    return framing;
  // Repeated fields, or one field with a list, must all agree (RFC 9112 §6.3).
  const std::vector<std::string> values = req.header_values("content-length");
  std::string_view agreed;  // points into `values`
  for (const std::string& value : values) {
    std::string_view rest = value;
    while (true) {
      const std::size_t comma = rest.find(',');
      const std::string_view one = trim(rest.substr(0, comma));
      if (one.empty() || one.size() > 18 ||
          !std::all_of(one.begin(), one.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
          (!agreed.empty() && one != agreed)) {
        throw HttpFailure{400, "invalid Content-Length"};
      }
      agreed = one;
      if (comma == std::string_view::npos)
        break;
      rest.remove_prefix(comma + 1);
    }
  }
  std::from_chars(agreed.data(), agreed.data() + agreed.size(), framing.length);
  if (framing.length > max_body) {
    throw HttpFailure{413, fmt::format("the request body of {} bytes is over the limit of {}",
                                       framing.length, max_body)};
  }
  return framing;
}

std::string status_line(int status) {
  return fmt::format("HTTP/1.1 {} {}\r\nDate: {}\r\n", status, reason_phrase(status), http_date());
}

// --- Request ------------------------------------------------------------------------------------

std::string Request::header(std::string_view lower_name) const {
  const auto it = headers.find(std::string(lower_name));
  return it == headers.end() ? std::string() : it->second;
}

std::vector<std::string> Request::header_values(std::string_view lower_name) const {
  std::vector<std::string> out;
  for (const auto& [name, value] : header_fields) {
    if (name == lower_name)
      out.push_back(value);
  }
  return out;
}

std::string Request::param(std::string_view name) const {
  const auto it = params.find(std::string(name));
  return it == params.end() ? std::string() : it->second;
}

std::string percent_decode(std::string_view s, bool plus_as_space) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9')
      return c - '0';
    if (c >= 'a' && c <= 'f')
      return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
      return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 && hex(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2])));
      i += 2;
    } else if (s[i] == '+' && plus_as_space) {
      out.push_back(' ');
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::multimap<std::string, std::string> parse_query(std::string_view query) {
  std::multimap<std::string, std::string> out;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (!pair.empty()) {
      const std::size_t eq = pair.find('=');
      out.emplace(
          percent_decode(pair.substr(0, eq), true),
          eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1), true));
    }
    if (amp == std::string_view::npos)
      break;
    query.remove_prefix(amp + 1);
  }
  return out;
}

}  // namespace trainctl::sandbox
