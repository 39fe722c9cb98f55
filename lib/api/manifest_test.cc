#include "api/manifest.h"

#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

std::string parse_error(std::string_view text) {
  try {
    parse_manifests(text, "jobs.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Validation);
    return e.message();
  }
  return "no error";
}

TEST(ParseManifests, RecordsTheLineOfEveryField) {
  const auto manifests = parse_manifests(R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf:2.15
)",
                                         "job.yaml");
  ASSERT_EQ(manifests.size(), 1u);
  const SourceMap& src = manifests[0].source;
  EXPECT_EQ(src.file, "job.yaml");
  EXPECT_EQ(src.line_of(""), 1);
  EXPECT_EQ(src.line_of("kind"), 2);
  EXPECT_EQ(src.line_of("metadata.name"), 4);
  EXPECT_EQ(src.line_of("spec.tfReplicaSpecs.Worker.replicas"), 8);
  EXPECT_EQ(src.line_of("spec.tfReplicaSpecs.Worker.template.spec.containers[0]"), 12);
  EXPECT_EQ(src.line_of("spec.tfReplicaSpecs.Worker.template.spec.containers[0].image"), 13);
  EXPECT_EQ(manifests[0].object["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 2);
}

TEST(ParseManifests, MissingFieldsFallBackToTheNearestParent) {
  const auto manifests =
      parse_manifests("kind: TFJob\nspec:\n  tfReplicaSpecs:\n    PS: {}\n", "job.yaml");
  const SourceMap& src = manifests.at(0).source;
  EXPECT_EQ(src.line_of("spec.tfReplicaSpecs.PS.template.spec.containers[3].image"), 4);
  EXPECT_EQ(src.line_of("metadata.name"), 1);
  EXPECT_EQ(SourceMap{}.line_of("anything"), 0);
}

TEST(ParseManifests, MultipleDocumentsKeepFileLinesAndSkipEmptyOnes) {
  const auto manifests = parse_manifests(R"(---
kind: TFJob
metadata: {name: a}
---
# only a comment
---
kind: PyTorchJob
metadata:
  name: b
---
)",
                                         "jobs.yaml");
  ASSERT_EQ(manifests.size(), 2u);
  EXPECT_EQ(manifests[0].object["metadata"]["name"], "a");
  EXPECT_EQ(manifests[0].source.line_of(""), 2);
  EXPECT_EQ(manifests[0].source.line_of("metadata"), 3);
  EXPECT_EQ(manifests[1].object["kind"], "PyTorchJob");
  EXPECT_EQ(manifests[1].source.line_of(""), 7);
  EXPECT_EQ(manifests[1].source.line_of("metadata.name"), 9);
}

TEST(ParseManifests, EmptyInputHasNoManifests) {
  EXPECT_TRUE(parse_manifests("", "x.yaml").empty());
  EXPECT_TRUE(parse_manifests("---\n# nothing\n", "x.yaml").empty());
}

TEST(ParseManifests, ReadsJsonWithLines) {
  const auto manifests = parse_manifests(R"({
  "apiVersion": "kubeflow.org/v1",
  "kind": "PyTorchJob",
  "metadata": {"name": "ddp", "labels": {"v": "1"}},
  "spec": {
    "pytorchReplicaSpecs": {
      "Master": {"replicas": 1, "template": {"spec": {"containers": [
        {"name": "pytorch", "image": "pt", "args": ["--lr", "0.1"]}
      ]}}}
    }
  }
})",
                                         "job.json");
  ASSERT_EQ(manifests.size(), 1u);
  const json& obj = manifests[0].object;
  EXPECT_EQ(obj["metadata"]["labels"]["v"], "1") << "a quoted JSON string stays a string";
  EXPECT_EQ(obj["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"], 1);
  EXPECT_EQ(
      obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["args"][1],
      "0.1");
  EXPECT_EQ(manifests[0].source.line_of("kind"), 3);
  EXPECT_EQ(manifests[0].source.line_of(
                "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image"),
            8);
}

TEST(ParseManifests, ScalarsAreTypedByTheCoreSchema) {
  const json obj =
      parse_manifests("a: 1\nb: '1'\nc: true\nd: ~\ne: 1.5\nf: yes\n", "x").at(0).object;
  EXPECT_EQ(obj, json::parse(R"({"a":1,"b":"1","c":true,"d":null,"e":1.5,"f":"yes"})"));
}

TEST(ParseManifests, SyntaxErrorsNameFileLineAndColumn) {
  EXPECT_EQ(parse_error("kind: TFJob\nspec:\n  a: [1, 2\n"),
            "jobs.yaml:4:1: end of sequence flow not found");
  EXPECT_EQ(parse_error("kind: TFJob\n  bad: indent\n"), "jobs.yaml:2:6: illegal map value");
  EXPECT_EQ(parse_error(R"({"kind": "TFJob",)"), "jobs.yaml:1:1: end of map flow not found");
}

// yaml-cpp 0.7 loops forever, allocating, on a token that cannot start a node (found by
// tests/fuzz/manifest_fuzz.cc); it must be a syntax error at that token instead.
TEST(ParseManifests, AStrayCommaIsASyntaxErrorNotAHang) {
  EXPECT_EQ(parse_error("\"x\", \"y\"\n"), "jobs.yaml:1:4: did not find expected node content");
  EXPECT_EQ(parse_error("kind: TFJob\n---\n\"a\", b\n"),
            "jobs.yaml:3:4: did not find expected node content");
}

// Found by fuzz_manifest: a NUL byte became a key that is not UTF-8, and printing the job threw.
TEST(ParseManifests, ControlCharactersAreRejectedAtTheirLineAndColumn) {
  EXPECT_EQ(parse_error(std::string("#\n\0N:", 5)),
            "jobs.yaml:2: control character 0x00 at column 1: YAML does not allow control "
            "characters");
  EXPECT_EQ(parse_error("kind: TFJob\nmetadata: {name: a\x07"
                        "b}\n"),
            "jobs.yaml:2: control character 0x07 at column 19: YAML does not allow control "
            "characters");
  EXPECT_EQ(parse_error("kind: TFJob\r\nspec:\n\tx: 1\n").find("control character"),
            std::string::npos);  // CR, LF and tab are allowed (tab then fails as YAML indentation)
}

TEST(ParseManifests, DocumentsThatAreNotMappingsAreNamed) {
  EXPECT_EQ(parse_error("kind: TFJob\n---\n- a\n- b\n"),
            "jobs.yaml:3: document 2: expected a mapping (a Kubernetes object), got a list");
  EXPECT_EQ(parse_error("just text\n"),
            "jobs.yaml:1: document 1: expected a mapping (a Kubernetes object), got a scalar");
}

TEST(ParseManifests, TextThatIsNotUtf8IsRejectedAtItsLineAndColumn) {
  EXPECT_EQ(parse_error("kind: TFJob\nmetadata:\n  name: \"x\xff\xfe\"\n"),
            "jobs.yaml:3: invalid UTF-8 byte 0xff at column 11");
  EXPECT_EQ(parse_error("\xe9t\xe9: 1\n"), "jobs.yaml:1: invalid UTF-8 byte 0xe9 at column 1");
  // Anywhere in the text, as kubectl reads it: a later document, a comment.
  EXPECT_EQ(parse_error("kind: TFJob\n---\nkind: TFJob # caf\xe9\n"),
            "jobs.yaml:3: invalid UTF-8 byte 0xe9 at column 18");
  EXPECT_EQ(parse_error("\xff\xfe"
                        "k"),
            "jobs.yaml:1: invalid UTF-8 byte 0xff at column 1 (a UTF-16 byte order mark: save the "
            "file as UTF-8)");
  // Valid UTF-8 passes as it is.
  EXPECT_EQ(parse_manifests("name: \"caf\xc3\xa9 \xe2\x9c\x93\"\n", "x").at(0).object["name"],
            "caf\xc3\xa9 \xe2\x9c\x93");
}

TEST(SourceMap, RenamePrefixMovesASubtreeOnly) {
  SourceMap src;
  src.lines = {{"spec.x.worker", 3}, {"spec.x.worker.replicas", 4}, {"spec.x.workers", 9}};
  src.rename_prefix("spec.x.worker", "spec.x.Worker");
  EXPECT_EQ(src.line_of("spec.x.Worker.replicas"), 4);
  EXPECT_EQ(src.line_of("spec.x.Worker"), 3);
  EXPECT_EQ(src.line_of("spec.x.workers"), 9);
  EXPECT_FALSE(src.lines.contains("spec.x.worker"));
}

}  // namespace
}  // namespace trainctl::api
