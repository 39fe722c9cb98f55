// The sandbox's HTTP/1.1 request parser: the head (request line, target and query decoding,
// header fields) and the body framing, as the server reads each request off a connection.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sandbox/http_message.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace sandbox = trainctl::sandbox;
  std::string_view buffer(reinterpret_cast<const char*>(data), size);
  // As RequestReader: blank lines before a request are skipped, then the head up to its end.
  const std::size_t start = buffer.find_first_not_of("\r\n");
  buffer.remove_prefix(start == std::string_view::npos ? buffer.size() : start);
  const std::size_t end = trainctl::find_head_end(buffer);
  if (end == std::string_view::npos || end > buffer.size())
    return 0;
  sandbox::Request request;
  try {
    sandbox::parse_head(buffer.substr(0, end), request);
    const trainctl::BodyFraming framing = sandbox::body_framing(request, 1 << 20);
    if (!framing.chunked && framing.length > (1u << 20))
      __builtin_trap();  // past the limit it was given
  } catch (const trainctl::HttpFailure& failure) {
    if (failure.status < 400 || failure.status > 599)
      __builtin_trap();
    return 0;
  }
  (void)request.param("watch");
  (void)request.header("content-type");
  return 0;
}
