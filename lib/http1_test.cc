#include "http1.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "error.h"

namespace trainctl {
namespace {

/// A connection that hands out `bytes` at most `step` at a time, then the end of the stream (or,
/// with `then_silent`, a timeout).
MessageReader::ReadSome reads_of(std::string bytes, std::size_t step, bool then_silent = false) {
  auto pos = std::make_shared<std::size_t>(0);
  return [bytes = std::move(bytes), step, then_silent, pos](char* buf, std::size_t n) {
    if (*pos == bytes.size() && then_silent)
      throw Error(ErrorKind::Timeout, "timed out waiting for a read");
    const std::size_t got = std::min({n, step, bytes.size() - *pos});
    std::memcpy(buf, bytes.data() + *pos, got);
    *pos += got;
    return got;
  };
}

const std::string kChunkedMessage =
    "\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    "4;ext=\"a b\"\r\nWiki\r\n0b\r\npedia in \r\n\r\n3\r\n123\r\n0\r\nX-Trailer: t\r\n\r\n"
    "HTTP/1.1 204 No Content\r\n\r\n";

// However the connection splits the bytes, the reader finds the same head, body and next message.
TEST(MessageReaderTest, ReadsTheSameMessagesWhateverTheSplitOfTheStream) {
  for (std::size_t step = 1; step <= kChunkedMessage.size(); ++step) {
    std::string buffer;
    MessageReader reader(reads_of(kChunkedMessage, step), buffer);
    std::string head;
    ASSERT_TRUE(reader.read_head(head)) << step;
    EXPECT_EQ(head, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n") << step;
    std::string body;
    EXPECT_TRUE(reader.read_body({.chunked = true}, 100, [&](std::string_view piece) {
      body.append(piece);
      return true;
    }));
    EXPECT_EQ(body, "Wikipedia in \r\n123") << step;
    ASSERT_TRUE(reader.read_head(head)) << step;
    EXPECT_EQ(head, "HTTP/1.1 204 No Content\r\n\r\n") << step;
    EXPECT_FALSE(reader.read_head(head)) << step;
    EXPECT_FALSE(reader.idled_out());
  }
}

TEST(MessageReaderTest, FixedAndToTheEndBodiesAndASinkThatStopsEarly) {
  std::string buffer;
  MessageReader reader(reads_of("0123456789abcdef", 3), buffer);
  std::string body;
  const auto into_body = [&](std::string_view piece) {
    body.append(piece);
    return true;
  };
  EXPECT_TRUE(reader.read_body({.length = 4}, SIZE_MAX, into_body));
  EXPECT_EQ(body, "0123");
  int pieces = 0;
  EXPECT_FALSE(
      reader.read_body({.to_end = true}, SIZE_MAX, [&](std::string_view) { return ++pieces < 2; }));
  EXPECT_EQ(pieces, 2);
  body.clear();
  EXPECT_TRUE(reader.read_body({.to_end = true}, SIZE_MAX, into_body));
  EXPECT_EQ(body.back(), 'f');
  EXPECT_LT(body.size(), 12u);  // what the stopped sink was handed is not handed again
}

TEST(MessageReaderTest, MalformedOrOversizedBodiesAreRefusedWithTheirStatus) {
  const auto refusal = [](const std::string& bytes, std::size_t max_body) {
    std::string buffer;
    MessageReader reader(reads_of(bytes, 7), buffer);
    try {
      reader.read_body({.chunked = true}, max_body, [](std::string_view) { return true; });
    } catch (const HttpFailure& failure) {
      return std::to_string(failure.status) + " " + failure.message;
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refusal("zz\r\n", 100), "400 malformed chunk size");
  EXPECT_EQ(refusal("\r\n", 100), "400 malformed chunk size");
  EXPECT_EQ(refusal("3\r\nabcd\r\n0\r\n\r\n", 100), "400 chunk data longer than its size");
  EXPECT_EQ(refusal("8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n", 10),
            "413 the body is over the limit of 10 bytes");
  EXPECT_EQ(refusal(std::string(5000, '1') + "\r\n", 100),
            "400 malformed chunked body: chunk size line too long");
  EXPECT_EQ(refusal("3\r\nabc\r\n0\r\n\r\n", 100), "accepted");

  std::string buffer;
  MessageReader cut(reads_of("5\r\nab", 7), buffer);
  try {
    cut.read_body({.chunked = true}, 100, [](std::string_view) { return true; });
    ADD_FAILURE() << "a body cut short was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Connection);
    EXPECT_EQ(e.message(), "the connection closed within a message body");
  }
}

TEST(MessageReaderTest, AHeadTooLargeCutShortOrNeverSentIsToldApart) {
  std::string buffer;
  std::string head;
  MessageReader large(reads_of("GET / HTTP/1.1\r\nX: " + std::string(kMaxHead, 'a'), 4096), buffer);
  try {
    large.read_head(head);
    ADD_FAILURE() << "a head over the limit was read";
  } catch (const HttpFailure& failure) {
    EXPECT_EQ(failure.status, 431);
  }

  buffer.clear();
  MessageReader cut(reads_of("HTTP/1.1 200 OK\r\nContent-Le", 5), buffer);
  try {
    cut.read_head(head);
    ADD_FAILURE() << "a head cut short was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "the connection closed within a message head");
  }

  buffer.clear();
  MessageReader silent(reads_of("\r\n", 5, /*then_silent=*/true), buffer);
  EXPECT_FALSE(silent.read_head(head));
  EXPECT_TRUE(silent.idled_out());
}

}  // namespace
}  // namespace trainctl
