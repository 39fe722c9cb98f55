// The CLI's HTTP/1.1 response reader (kube/direct_transport.h): heads with informational answers
// before them, and bodies framed by length, chunks or the end of the stream, however the
// connection splits the bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "error.h"
#include "http1.h"
#include "kube/direct_transport.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  // The first byte: the request's method and how many bytes each read hands out.
  const std::string method = (data[0] & 1) != 0 ? "HEAD" : "GET";
  const std::size_t step = 1 + (data[0] >> 1);
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  std::size_t pos = 0;
  std::string buffer;
  trainctl::MessageReader reader(
      [&](char* buf, std::size_t n) {
        const std::size_t got = std::min({n, step, bytes.size() - pos});
        std::memcpy(buf, bytes.data() + pos, got);
        pos += got;
        return got;
      },
      buffer);
  try {
    trainctl::kube::ResponseHead head = trainctl::kube::read_response_head(reader, method);
    if (head.response.status < 100 || head.response.status > 999)
      __builtin_trap();
    std::size_t body = 0;
    const bool whole = reader.read_body(head.framing, 1 << 20, [&](std::string_view piece) {
      body += piece.size();
      return true;
    });
    if (!whole || body > bytes.size() ||
        (!head.framing.chunked && !head.framing.to_end && body != head.framing.length))
      __builtin_trap();  // a body larger than the input, or not the length it announced
  } catch (const trainctl::HttpFailure& failure) {
    if (failure.status < 400 || failure.status > 599)
      __builtin_trap();
  } catch (const trainctl::Error& e) {
    if (e.kind() != trainctl::ErrorKind::Connection)
      __builtin_trap();  // the input ran out: nothing else may go wrong
  }
  return 0;
}
