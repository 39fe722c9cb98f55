#include "error.h"

#include <gtest/gtest.h>

namespace trainctl {
namespace {

TEST(ErrorTest, StatusBodyGivesReasonMessageAndKind) {
  const std::string body = R"({"kind":"Status","apiVersion":"v1","status":"Failure",
    "message":"tfjobs.kubeflow.org \"mnist\" not found","reason":"NotFound","code":404})";
  Error e = Error::from_response(404, body);
  EXPECT_EQ(e.kind(), ErrorKind::NotFound);
  EXPECT_EQ(e.http_code(), 404);
  EXPECT_EQ(e.reason(), "NotFound");
  EXPECT_EQ(e.message(), "tfjobs.kubeflow.org \"mnist\" not found (HTTP 404)");
  EXPECT_EQ(e.status()["code"], 404);
}

// The 403 kube-apiserver 1.26 answers a create in a namespace being deleted (checked on the real
// control plane): its cause, not its message, says why.
TEST(ErrorTest, StatusCausesAreFoundByReason) {
  const Error e = Error::from_response(403, R"({"kind":"Status","apiVersion":"v1",
    "status":"Failure","reason":"Forbidden","code":403,
    "message":"configmaps \"x\" is forbidden: unable to create new content in namespace t because it is being terminated",
    "details":{"name":"x","kind":"configmaps","causes":[{"reason":"NamespaceTerminating",
      "message":"namespace t is being terminated","field":"metadata.namespace"}]}})");
  EXPECT_TRUE(e.has_status_cause("NamespaceTerminating"));
  EXPECT_FALSE(e.has_status_cause("ResourceVersionTooLarge"));
  EXPECT_FALSE(Error(ErrorKind::Forbidden, "no Status body", 403).has_status_cause("Forbidden"));
}

TEST(ErrorTest, ExpiredReasonIsGoneWhateverTheCode) {
  Error e = Error::from_response(
      500, R"({"kind":"Status","reason":"Expired","message":"too old resource version"})");
  EXPECT_EQ(e.kind(), ErrorKind::Gone);
}

TEST(ErrorTest, CodesMapAsClientGoDoes) {
  EXPECT_EQ(kind_for_status(409, "AlreadyExists"), ErrorKind::AlreadyExists);
  EXPECT_EQ(kind_for_status(409, ""), ErrorKind::Conflict);
  EXPECT_EQ(kind_for_status(410, ""), ErrorKind::Gone);
  EXPECT_EQ(kind_for_status(422, "Invalid"), ErrorKind::Invalid);
  EXPECT_EQ(kind_for_status(401, "Unauthorized"), ErrorKind::Unauthorized);
  EXPECT_EQ(kind_for_status(403, "Forbidden"), ErrorKind::Forbidden);
  EXPECT_EQ(kind_for_status(429, "TooManyRequests"), ErrorKind::TooManyRequests);
  EXPECT_EQ(kind_for_status(503, "ServiceUnavailable"), ErrorKind::ServerError);
  EXPECT_EQ(kind_for_status(504, ""), ErrorKind::Timeout);
  EXPECT_EQ(kind_for_status(415, ""), ErrorKind::UnsupportedMediaType);
  EXPECT_EQ(kind_for_status(405, "MethodNotAllowed"), ErrorKind::MethodNotAllowed);
}

TEST(ErrorTest, NonStatusBodyIsQuotedAndTruncated) {
  Error e = Error::from_response(502, std::string(2000, 'x'));
  EXPECT_EQ(e.kind(), ErrorKind::ServerError);
  EXPECT_TRUE(e.status().is_null());
  EXPECT_LT(e.message().size(), 600u);
  EXPECT_NE(e.message().find("(HTTP 502)"), std::string::npos);
}

TEST(ErrorTest, EmptyBodyStillSaysWhatHappened) {
  Error e = Error::from_response(403, "");
  EXPECT_EQ(e.message(), "the server answered HTTP 403 (Forbidden)");
}

TEST(ErrorTest, ExitCodesAreTheDocumentedOnes) {
  EXPECT_EQ(exit_code(ErrorKind::Usage), 2);
  EXPECT_EQ(exit_code(ErrorKind::Config), 2);
  EXPECT_EQ(exit_code(ErrorKind::Validation), 2);
  EXPECT_EQ(exit_code(ErrorKind::NotFound), 3);
  EXPECT_EQ(exit_code(ErrorKind::Connection), 3);
  EXPECT_EQ(exit_code(ErrorKind::Timeout), 3);
  EXPECT_EQ(exit_code(ErrorKind::WaitTimeout), 4);
}

}  // namespace
}  // namespace trainctl
