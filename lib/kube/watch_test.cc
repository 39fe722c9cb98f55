#include "kube/watch.h"

#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::kube {
namespace {

const std::string kAdded =
    R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"5"}}})";
const std::string kBookmark =
    R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}})";

TEST(WatchDecoderTest, EventSplitAtEveryByteBoundary) {
  const std::string stream = kAdded + "\n" + kBookmark + "\n";
  for (size_t split = 0; split <= stream.size(); ++split) {
    WatchDecoder d;
    d.feed(std::string_view(stream).substr(0, split));
    std::vector<WatchEvent> events;
    while (auto e = d.next())
      events.push_back(*e);
    d.feed(std::string_view(stream).substr(split));
    while (auto e = d.next())
      events.push_back(*e);
    ASSERT_EQ(events.size(), 2u) << split;
    EXPECT_EQ(events[0].type, WatchEventType::Added);
    EXPECT_EQ(events[0].object["metadata"]["name"], "a");
    EXPECT_EQ(events[1].type, WatchEventType::Bookmark);
    EXPECT_EQ(d.pending_bytes(), 0u);
  }
}

TEST(WatchDecoderTest, PartialLineWaitsForItsNewline) {
  WatchDecoder d;
  d.feed(kAdded);
  EXPECT_FALSE(d.next().has_value());
  EXPECT_EQ(d.pending_bytes(), kAdded.size());
  d.feed("\r\n\n");
  EXPECT_TRUE(d.next().has_value());
  EXPECT_FALSE(d.next().has_value());
}

TEST(WatchDecoderTest, ErrorEventCarriesTheStatus) {
  WatchDecoder d;
  d.feed(R"j({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired",)j"
         R"j("message":"too old resource version: 5 (90)"}})j"
         "\n");
  auto e = d.next();
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, WatchEventType::Error);
  EXPECT_EQ(e->object["code"], 410);
}

TEST(WatchDecoderTest, MalformedLineNamesItsPosition) {
  WatchDecoder d;
  d.feed(kAdded + "\n{not json\n");
  EXPECT_TRUE(d.next().has_value());
  try {
    d.next();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Protocol);
    EXPECT_NE(e.message().find("event #2"), std::string::npos) << e.message();
  }
}

TEST(WatchDecoderTest, UnknownTypeIsAProtocolError) {
  EXPECT_THROW(parse_watch_event(R"({"type":"RENAMED","object":{}})"), Error);
  EXPECT_THROW(parse_watch_event(R"({"type":"ADDED"})"), Error);
}

}  // namespace
}  // namespace trainctl::kube
