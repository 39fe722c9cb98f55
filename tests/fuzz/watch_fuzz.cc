// The watch stream decoder: newline-delimited JSON events arriving in arbitrary chunks.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "error.h"
#include "kube/watch.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace kube = trainctl::kube;
  if (size == 0)
    return 0;
  // The first byte picks the chunk size the body arrives in.
  const std::size_t chunk = std::size_t{data[0]} + 1;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  kube::WatchDecoder decoder;
  try {
    for (std::size_t at = 0; at < body.size(); at += chunk) {
      decoder.feed(body.substr(at, chunk));
      while (auto event = decoder.next())
        (void)kube::to_string(event->type);
    }
  } catch (const trainctl::Error&) {
  }
  return 0;
}
