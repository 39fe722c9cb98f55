#include "sandbox/selector.h"

#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::sandbox {
namespace {

using nlohmann::json;

// The message of the Error `f` throws; fails the test when it throws none or another kind.
template <typename F>
std::string error_message(F&& f, ErrorKind kind = ErrorKind::BadRequest) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    return e.message();
  }
  ADD_FAILURE() << "expected an error";
  return "";
}

const json kLabels = {{"app", "web"}, {"tier", "frontend"}, {"replicas", "3"}};

TEST(LabelSelectorTest, EqualityOperators) {
  EXPECT_TRUE(LabelSelector::parse("app=web").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("app==web").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("app=db").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("app!=db").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("app!=web").matches(kLabels));
  // != and notin also match objects without the label, as the server's do.
  EXPECT_TRUE(LabelSelector::parse("missing!=x").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("missing=x").matches(kLabels));
}

TEST(LabelSelectorTest, SetOperators) {
  EXPECT_TRUE(LabelSelector::parse("tier in (backend,frontend)").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("tier in (backend)").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("tier notin (backend)").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("tier notin (frontend,db)").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("missing notin (x)").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("missing in (x)").matches(kLabels));
}

TEST(LabelSelectorTest, ExistenceAndNumericOperators) {
  EXPECT_TRUE(LabelSelector::parse("app").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("!app").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("!missing").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("missing").matches(kLabels));
  EXPECT_TRUE(LabelSelector::parse("replicas>2").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("replicas<3").matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("app>1").matches(kLabels));  // not a number
}

TEST(LabelSelectorTest, CommaSeparatedRequirementsAreAndedAndWhitespaceIsTolerated) {
  auto selector = LabelSelector::parse("  app = web ,\ttier in ( frontend , db ) , !canary ");
  EXPECT_EQ(selector.requirements().size(), 3u);
  EXPECT_TRUE(selector.matches(kLabels));
  EXPECT_FALSE(selector.matches(json{{"app", "web"}, {"tier", "frontend"}, {"canary", "1"}}));
  EXPECT_FALSE(selector.matches(json{{"app", "web"}}));
  EXPECT_FALSE(selector.matches(nullptr));
}

TEST(LabelSelectorTest, EmptySelectorMatchesEverything) {
  auto selector = LabelSelector::parse("");
  EXPECT_TRUE(selector.empty());
  EXPECT_TRUE(selector.matches(nullptr));
  EXPECT_TRUE(selector.matches(kLabels));
  EXPECT_FALSE(LabelSelector::parse("a").empty());
}

TEST(LabelSelectorTest, PrefixedKeysAndEmptyValues) {
  EXPECT_TRUE(LabelSelector::parse("training.kubeflow.org/job-name=mnist")
                  .matches(json{{"training.kubeflow.org/job-name", "mnist"}}));
  EXPECT_TRUE(LabelSelector::parse("a=").matches(json{{"a", ""}}));
  EXPECT_TRUE(LabelSelector::parse("a in (,x)").matches(json{{"a", ""}}));
  // `in` is an ordinary value where a value is expected.
  EXPECT_TRUE(LabelSelector::parse("a in (in,notin)").matches(json{{"a", "notin"}}));
}

TEST(LabelSelectorTest, FromApiReadsMatchLabelsAndMatchExpressions) {
  // metav1.LabelSelectorAsSelector: null selects nothing, {} everything.
  EXPECT_FALSE(LabelSelector::from_api(nullptr).has_value());
  EXPECT_TRUE(LabelSelector::from_api(json::object())->matches(kLabels));
  const auto selector = LabelSelector::from_api(json::parse(R"({
      "matchLabels": {"app": "web"},
      "matchExpressions": [{"key": "tier", "operator": "In", "values": ["frontend", "edge"]},
                           {"key": "canary", "operator": "DoesNotExist"}]})"));
  ASSERT_TRUE(selector.has_value());
  EXPECT_EQ(selector->to_string(), "app=web,!canary,tier in (edge,frontend)");
  EXPECT_TRUE(selector->matches(kLabels));
  EXPECT_FALSE(selector->matches(json{{"app", "web"}, {"tier", "backend"}}));
  EXPECT_FALSE(selector->matches(json{{"app", "web"}, {"tier", "frontend"}, {"canary", "1"}}));
  EXPECT_EQ(error_message(
                [] {
                  LabelSelector::from_api(
                      json::parse(R"({"matchExpressions":[{"key":"a","operator":"Gt"}]})"));
                },
                ErrorKind::Invalid),
            "\"Gt\" is not a valid label selector operator");
}

TEST(LabelSelectorTest, CanonicalTextSortsByKey) {
  EXPECT_EQ(LabelSelector::parse("z=1, b notin (y,x), !a, c").to_string(),
            "!a,b notin (x,y),c,z=1");
}

TEST(LabelSelectorTest, InvalidKeyGivesTheServersMessage) {
  EXPECT_EQ(error_message([] { LabelSelector::parse("app:monolith"); }),
            "unable to parse requirement: <nil>: Invalid value: \"app:monolith\": name part must "
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')");
  EXPECT_EQ(error_message([] { LabelSelector::parse("a/b/c=d"); }),
            "unable to parse requirement: <nil>: Invalid value: \"a/b/c\": a qualified name must "
            "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
            "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS "
            "subdomain prefix and '/' (e.g. 'example.com/MyName')");
  EXPECT_EQ(error_message([] { LabelSelector::parse("Bad_Prefix/x"); }),
            "unable to parse requirement: <nil>: Invalid value: \"Bad_Prefix/x\": prefix part a "
            "lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
            "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
            "regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')");
}

TEST(LabelSelectorTest, InvalidValueNamesTheValuePath) {
  EXPECT_EQ(error_message([] { LabelSelector::parse("a=-x"); }),
            "unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must "
            "be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
            "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')");
  EXPECT_EQ(error_message([] { LabelSelector::parse("a>x"); }),
            "unable to parse requirement: values[0]: Invalid value: \"x\": for 'Gt', 'Lt' "
            "operators, the value must be an integer");
}

TEST(LabelSelectorTest, SyntaxErrorsGiveTheServersMessages) {
  EXPECT_EQ(error_message([] { LabelSelector::parse("a=b=c"); }),
            "found '=', expected: ',' or 'end of string'");
  EXPECT_EQ(error_message([] { LabelSelector::parse("a in (x"); }),
            "unable to parse requirement: found '', expected: ',' or ')'");
  EXPECT_EQ(error_message([] { LabelSelector::parse("a in x"); }),
            "unable to parse requirement: found 'x' expected: '('");
  EXPECT_EQ(error_message([] { LabelSelector::parse("a,"); }),
            "found '', expected: identifier after ','");
  EXPECT_EQ(error_message([] { LabelSelector::parse("=a"); }),
            "found '=', expected: !, identifier, or 'end of string'");
}

TEST(FieldSelectorTest, ParsesAndMatchesDottedPaths) {
  const json pod = {{"metadata", {{"name", "web-0"}, {"namespace", "default"}}},
                    {"spec", {{"nodeName", "node-1"}}},
                    {"status", {{"phase", "Running"}, {"podIPs", {{{"ip", "10.0.0.7"}}}}}}};
  EXPECT_TRUE(FieldSelector::parse("metadata.name=web-0,status.phase!=Pending").matches(pod));
  EXPECT_TRUE(FieldSelector::parse("spec.nodeName==node-1").matches(pod));
  EXPECT_FALSE(FieldSelector::parse("spec.nodeName=node-2").matches(pod));
  EXPECT_TRUE(FieldSelector::parse("spec.schedulerName=").matches(pod));  // absent is ""
  EXPECT_TRUE(FieldSelector::parse("status.podIP=10.0.0.7").matches(pod));
  EXPECT_TRUE(FieldSelector::parse("spec.hostNetwork=false").matches(pod));
  EXPECT_TRUE(FieldSelector::parse("").empty());
}

TEST(FieldSelectorTest, EscapedValues) {
  const json obj = {{"metadata", {{"name", "a,b=c"}}}};
  EXPECT_TRUE(FieldSelector::parse("metadata.name=a\\,b\\=c").matches(obj));
  EXPECT_EQ(error_message([] { FieldSelector::parse("metadata.name=a\\x"); }),
            "invalid field selector: invalid escape sequence: \\x");
}

TEST(FieldSelectorTest, DerivedFieldsAsTheServerComputesThem) {
  const json node = {{"metadata", {{"name", "n1"}}}, {"spec", json::object()}};
  EXPECT_TRUE(FieldSelector::parse("spec.unschedulable=false").matches(node));
  const json job = {{"status", {{"succeeded", 2}}}};
  EXPECT_EQ(field_value(job, "status.successful"), "2");
  const json event = {{"source", {{"component", "kubelet"}}},
                      {"involvedObject", {{"kind", "Pod"}}}};
  EXPECT_EQ(field_value(event, "source"), "kubelet");
  EXPECT_EQ(field_value(event, "involvedObject.kind"), "Pod");
}

TEST(FieldSelectorTest, SyntaxError) {
  EXPECT_EQ(error_message([] { FieldSelector::parse("metadata.name"); }),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'");
}

TEST(FieldSelectorTest, SupportedFieldsPerResource) {
  FieldSelector::parse("status.phase=Running,spec.nodeName=n").check_supported("pods");
  FieldSelector::parse("involvedObject.name=x,reason=Failed").check_supported("events");
  FieldSelector::parse("spec.unschedulable=true").check_supported("nodes");
  FieldSelector::parse("type=Opaque").check_supported("secrets");
  FieldSelector::parse("metadata.namespace=a").check_supported("tfjobs.kubeflow.org");
  EXPECT_EQ(error_message([] { FieldSelector::parse("spec.foo=1").check_supported("pods"); }),
            "field label not supported: spec.foo");
  EXPECT_EQ(
      error_message([] { FieldSelector::parse("metadata.namespace=x").check_supported("nodes"); }),
      "field label not supported: metadata.namespace");
  EXPECT_EQ(error_message([] { FieldSelector::parse("data.x=1").check_supported("configmaps"); }),
            "\"data.x\" is not a known field selector: only \"metadata.name\", "
            "\"metadata.namespace\"");
  EXPECT_EQ(error_message([] {
              FieldSelector::parse("metadata.namespace=a")
                  .check_supported("queues.scheduling.volcano.sh", /*namespaced=*/false);
            }),
            "field label not supported: metadata.namespace");
}

TEST(FieldSelectorTest, SingleNamespace) {
  EXPECT_EQ(FieldSelector::parse("metadata.namespace=team-a").single_namespace(), "team-a");
  EXPECT_EQ(FieldSelector::parse("metadata.namespace!=team-a").single_namespace(), "");
}

TEST(BuiltinGroupTest, KubernetesOwnGroups) {
  EXPECT_TRUE(is_builtin_group(""));
  EXPECT_TRUE(is_builtin_group("batch"));
  EXPECT_TRUE(is_builtin_group("coordination.k8s.io"));
  EXPECT_FALSE(is_builtin_group("kubeflow.org"));
  EXPECT_FALSE(is_builtin_group("gateway.networking.k8s.io"));
}

}  // namespace
}  // namespace trainctl::sandbox
