// WebSocket frames as they arrive from a peer: decode, reassemble messages, read Close bodies;
// every decoded frame must encode back to bytes that decode to the same frame.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "error.h"
#include "kube/websocket.h"

namespace {

namespace ws = trainctl::kube::ws;

void check_round_trip(const ws::Frame& frame, bool masked) {
  ws::FrameDecoder decoder({.expect_masked = masked});
  decoder.feed(ws::encode_frame(
      frame, masked ? std::optional<std::array<std::uint8_t, 4>>({1, 2, 3, 4}) : std::nullopt));
  const auto again = decoder.next();
  if (!again || again->fin != frame.fin || again->opcode != frame.opcode ||
      again->payload != frame.payload || decoder.buffered() != 0)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  // The first byte: server or client side, a small or the default payload limit, chunk size.
  const bool masked = data[0] & 1;
  const std::size_t limit = (data[0] & 2) ? 200 : ws::kDefaultMaxPayload;
  const std::size_t chunk = (std::size_t{data[0]} >> 2) + 1;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  ws::FrameDecoder decoder({.max_payload = limit, .expect_masked = masked});
  ws::MessageReader reader(limit);
  try {
    for (std::size_t at = 0; at < bytes.size(); at += chunk) {
      decoder.feed(bytes.substr(at, chunk));
      while (auto frame = decoder.next()) {
        check_round_trip(*frame, masked);
        if (frame->opcode == ws::Opcode::Close)
          (void)ws::parse_close_payload(frame->payload);
        (void)reader.push(std::move(*frame));
      }
    }
  } catch (const trainctl::Error&) {
  }
  return 0;
}
