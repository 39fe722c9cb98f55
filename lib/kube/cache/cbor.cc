#include "kube/cache/cbor.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <string>

#include "json_access.h"

namespace trainctl::kube::cache {
namespace {

using nlohmann::json;

enum Major : std::uint8_t {
  kUnsigned = 0,
  kNegative = 1,
  kBytes = 2,
  kText = 3,
  kArray = 4,
  kMap = 5,
  kSimple = 7,
};
constexpr std::uint8_t kFalse = 0xF4, kTrue = 0xF5, kNull = 0xF6, kFloat32 = 0xFA, kFloat64 = 0xFB;
constexpr int kMaxDepth = 10'000;

void write_big_endian(std::vector<std::uint8_t>& out, std::uint64_t value, int bytes) {
  for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8)
    out.push_back(static_cast<std::uint8_t>(value >> shift));
}

void write_head(std::vector<std::uint8_t>& out, Major major, std::uint64_t argument) {
  const auto type = static_cast<std::uint8_t>(major << 5);
  if (argument < 24) {
    out.push_back(static_cast<std::uint8_t>(type | argument));
  } else if (argument <= 0xFF) {
    out.push_back(type | 24);
    write_big_endian(out, argument, 1);
  } else if (argument <= 0xFFFF) {
    out.push_back(type | 25);
    write_big_endian(out, argument, 2);
  } else if (argument <= 0xFFFF'FFFF) {
    out.push_back(type | 26);
    write_big_endian(out, argument, 4);
  } else {
    out.push_back(type | 27);
    write_big_endian(out, argument, 8);
  }
}

void write_text(std::vector<std::uint8_t>& out, std::string_view text) {
  write_head(out, kText, text.size());
  out.insert(out.end(), text.begin(), text.end());
}

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes)
      : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  json document(std::span<const std::string_view> members) {
    json out;
    if (!members.empty() && p_ != end_ && (*p_ >> 5) == kMap)
      projected_map(out, members);
    else
      value(out, 0);
    if (p_ != end_)
      fail("bytes after the value");
    return out;
  }

 private:
  struct Head {
    std::uint8_t major;
    std::uint8_t info;
    std::uint64_t argument;
  };

  [[noreturn]] static void fail(const char* what) {
    throw std::runtime_error(std::string("informer store: malformed CBOR: ") + what);
  }

  std::uint64_t read_big_endian(int bytes) {
    if (end_ - p_ < bytes)
      fail("cut short");
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i)
      value = (value << 8) | *p_++;
    return value;
  }

  Head head() {
    if (p_ == end_)
      fail("cut short");
    const std::uint8_t initial = *p_++;
    Head h{static_cast<std::uint8_t>(initial >> 5), static_cast<std::uint8_t>(initial & 31), 0};
    if (h.info < 24)
      h.argument = h.info;
    else if (h.info <= 27)
      h.argument = read_big_endian(1 << (h.info - 24));
    else
      fail("indefinite length or reserved value");
    return h;
  }

  std::string_view take(std::uint64_t size) {
    if (static_cast<std::uint64_t>(end_ - p_) < size)
      fail("cut short");
    const std::string_view bytes(reinterpret_cast<const char*>(p_), size);
    p_ += size;
    return bytes;
  }

  std::string_view key() {
    const Head h = head();
    if (h.major != kText)
      fail("a map key that is not text");
    return take(h.argument);
  }

  // A map's entries are at least two bytes each, an array's items one: a length the bytes left
  // cannot hold is refused before anything is reserved for it.
  void check_count(std::uint64_t count, std::uint64_t bytes_each) {
    if (count > static_cast<std::uint64_t>(end_ - p_) / bytes_each)
      fail("cut short");
  }

  void value(json& out, int depth) {
    if (depth > kMaxDepth)
      fail("nested too deep");
    const Head h = head();
    switch (h.major) {
      case kUnsigned:
        out = h.argument;
        return;
      case kNegative:
        if (h.argument > static_cast<std::uint64_t>(INT64_MAX))
          fail("a negative integer beyond 64 bits");
        out = -1 - static_cast<std::int64_t>(h.argument);
        return;
      case kBytes: {
        const std::string_view bytes = take(h.argument);
        out = json::binary(std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
        return;
      }
      case kText:
        out = std::string(take(h.argument));
        return;
      case kArray: {
        check_count(h.argument, 1);
        out = json::array();
        auto& items = out.get_ref<json::array_t&>();
        items.reserve(h.argument);
        for (std::uint64_t i = 0; i < h.argument; ++i)
          value(items.emplace_back(), depth + 1);
        return;
      }
      case kMap: {
        check_count(h.argument, 2);
        out = json::object();
        auto& members = out.get_ref<json::object_t&>();
        for (std::uint64_t i = 0; i < h.argument; ++i) {
          const std::string_view name = key();
          value(member_in_order(members, std::string(name)), depth + 1);  // written sorted
        }
        return;
      }
      case kSimple:
        simple(out, h);
        return;
      default:
        fail("a tag");
    }
  }

  void simple(json& out, const Head& h) {
    switch (h.info) {
      case kFalse & 31:
        out = false;
        return;
      case kTrue & 31:
        out = true;
        return;
      case kNull & 31:
        out = nullptr;
        return;
      case kFloat32 & 31:
        out = static_cast<double>(std::bit_cast<float>(static_cast<std::uint32_t>(h.argument)));
        return;
      case kFloat64 & 31:
        out = std::bit_cast<double>(h.argument);
        return;
      default:
        fail("a simple value other than false, true, null or a float");
    }
  }

  void projected_map(json& out, std::span<const std::string_view> members) {
    const Head h = head();
    check_count(h.argument, 2);
    out = json::object();
    auto& kept = out.get_ref<json::object_t&>();
    for (std::uint64_t i = 0; i < h.argument; ++i) {
      const std::string_view name = key();
      if (std::find(members.begin(), members.end(), name) != members.end())
        value(member_in_order(kept, std::string(name)), 1);
      else
        skip(1);
    }
  }

  // Past one value without building it: strings and byte strings by their length.
  void skip(int depth) {
    if (depth > kMaxDepth)
      fail("nested too deep");
    const Head h = head();
    switch (h.major) {
      case kBytes:
      case kText:
        take(h.argument);
        return;
      case kArray:
        check_count(h.argument, 1);
        for (std::uint64_t i = 0; i < h.argument; ++i)
          skip(depth + 1);
        return;
      case kMap:
        check_count(h.argument, 2);
        for (std::uint64_t i = 0; i < h.argument; ++i) {
          key();
          skip(depth + 1);
        }
        return;
      case kSimple: {
        json ignored;
        simple(ignored, h);
        return;
      }
      case kUnsigned:
      case kNegative:
        return;
      default:
        fail("a tag");
    }
  }

  const std::uint8_t* p_;
  const std::uint8_t* end_;
};

}  // namespace

void encode_cbor(const json& value, std::vector<std::uint8_t>& out) {
  switch (value.type()) {
    case json::value_t::null:
    case json::value_t::discarded:
      out.push_back(kNull);
      return;
    case json::value_t::boolean:
      out.push_back(value.get<bool>() ? kTrue : kFalse);
      return;
    case json::value_t::number_unsigned:
      write_head(out, kUnsigned, value.get<std::uint64_t>());
      return;
    case json::value_t::number_integer: {
      const std::int64_t number = value.get<std::int64_t>();
      if (number >= 0)
        write_head(out, kUnsigned, static_cast<std::uint64_t>(number));
      else
        write_head(out, kNegative, static_cast<std::uint64_t>(-(number + 1)));
      return;
    }
    case json::value_t::number_float:
      out.push_back(kFloat64);
      write_big_endian(out, std::bit_cast<std::uint64_t>(value.get<double>()), 8);
      return;
    case json::value_t::string:
      write_text(out, value.get_ref<const std::string&>());
      return;
    case json::value_t::binary: {
      const auto& bytes = value.get_binary();
      write_head(out, kBytes, bytes.size());
      out.insert(out.end(), bytes.begin(), bytes.end());
      return;
    }
    case json::value_t::array:
      write_head(out, kArray, value.size());
      for (const json& item : value)
        encode_cbor(item, out);
      return;
    case json::value_t::object:
      write_head(out, kMap, value.size());
      for (const auto& [name, member] : value.get_ref<const json::object_t&>()) {
        write_text(out, name);
        encode_cbor(member, out);
      }
      return;
  }
}

json decode_cbor(std::span<const std::uint8_t> bytes, std::span<const std::string_view> members) {
  return Reader(bytes).document(members);
}

}  // namespace trainctl::kube::cache
