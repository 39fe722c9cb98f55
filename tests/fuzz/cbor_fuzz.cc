// The informer store's CBOR codec (lib/kube/cache/cbor.h) against nlohmann's: a JSON document
// encoded and decoded gives what nlohmann's to_cbor and from_cbor give, to the type and the bit;
// decoded keeping some top-level members, the same less the others. Arbitrary bytes decode or
// throw std::runtime_error, never read out of bounds.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include "identical_json.h"
#include "json_parse.h"
#include "kube/cache/cbor.h"

using nlohmann::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace cache = trainctl::kube::cache;
  const std::span<const std::uint8_t> bytes(data, size);
  try {
    (void)cache::decode_cbor(bytes);
    static constexpr std::string_view kept[] = {"metadata", "status"};
    (void)cache::decode_cbor(bytes, kept);
  } catch (const std::runtime_error&) {
  }

  const json doc =
      trainctl::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), false);
  if (doc.is_discarded())
    return 0;
  std::vector<std::uint8_t> encoded;
  cache::encode_cbor(doc, encoded);
  if (!identical_json(cache::decode_cbor(encoded), json::from_cbor(json::to_cbor(doc))))
    std::abort();
  if (doc.is_object()) {
    static constexpr std::string_view kept[] = {"metadata", "b"};
    json expected = json::from_cbor(json::to_cbor(doc));
    for (auto it = expected.begin(); it != expected.end();) {
      if (it.key() != "metadata" && it.key() != "b")
        it = expected.erase(it);
      else
        ++it;
    }
    if (!identical_json(cache::decode_cbor(encoded, kept), expected))
      std::abort();
  }
  return 0;
}
