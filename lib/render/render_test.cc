#include "render/render.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "error.h"
#include "render/templates.h"
#include "tests/support/expect_error.h"
#include "yaml_json.h"

namespace trainctl::render {
namespace {

using nlohmann::json;

std::string render_kind(const std::string& kind, const json& values) {
  TemplateSearchPath search;
  search.source_dir = std::filesystem::path(TRAINCTL_SOURCE_DIR) / "templates";
  return render_template(read_template(find_template(search, kind)), values, kind);
}

json parse(const std::string& yaml) {
  try {
    return yaml_to_json(YAML::Load(yaml));
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << e.what() << "\n" << yaml;
    return nullptr;
  }
}

json render_parsed(const std::string& kind, const json& values) {
  return parse(render_kind(kind, values));
}

const json kBase = json::parse(R"({
  "name": "mnist", "namespace": "team-a", "image": "registry/train:1.2",
  "command": ["python", "train.py", "--epochs=3"], "workers": 4, "gpus": 8, "cpu": 16,
  "memory": "64Gi", "env": [{"name": "LR", "value": "0.1"}, {"name": "SEED", "value": 7}],
  "labels": {"team": "a"}, "annotations": {"sidecar.istio.io/inject": "false"},
  "queue": "team-a", "minAvailable": 5, "priorityClass": "high"
})");

TEST(RenderContext, RolesInheritAndOverride) {
  json v = kBase;
  v["worker"] = {{"image", "w:2"}, {"cpu", 4}};
  json ctx = render_context(v);
  EXPECT_EQ(ctx["roles"]["worker"]["image"], "w:2");
  EXPECT_EQ(ctx["roles"]["ps"]["image"], "registry/train:1.2");
  EXPECT_EQ(ctx["roles"]["worker"]["resources"], json::parse(R"({
      "limits": {"cpu": "4", "memory": "64Gi", "nvidia.com/gpu": 8},
      "requests": {"cpu": "4", "memory": "64Gi"}})"));
  EXPECT_FALSE(ctx["roles"]["launcher"]["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_EQ(ctx["roles"]["worker"]["env"][1], json::parse(R"({"name":"SEED","value":"7"})"));
}

TEST(RenderContext, ResourcesAreKubernetesQuantities) {
  // GPUs are an integer count however they were given; CPU and memory are quantity strings.
  for (const json& gpus : {json(2), json(2.0), json("2")}) {
    json v = json::parse(R"({"cpu": 0.5, "memory": "16Gi"})");
    v["gpus"] = gpus;
    const json limits = render_context(v)["roles"]["worker"]["resources"]["limits"];
    EXPECT_EQ(limits["nvidia.com/gpu"], 2) << gpus;
    EXPECT_TRUE(limits["nvidia.com/gpu"].is_number_integer()) << gpus;
    EXPECT_EQ(limits["cpu"], "0.5");
    EXPECT_EQ(limits["memory"], "16Gi");
  }
  const json none = render_context(json::parse(R"({"gpus": "0"})"))["roles"]["worker"];
  EXPECT_FALSE(none.contains("resources"));
  EXPECT_EQ(render_context(json::parse(R"({"gpus": "4"})"))["derived"]["slotsPerWorker"], 4);
}

TEST(RenderContext, AGpuCountThatIsNoWholeNumberIsAValidationError) {
  for (const char* values : {R"({"gpus": 1.5})", R"({"gpus": "two"})", R"({"gpus": -1})",
                             R"({"worker": {"gpus": "1.5"}})"}) {
    const Error e = testing::expect_error([&] { render_context(json::parse(values)); });
    EXPECT_EQ(e.kind(), ErrorKind::Validation) << values;
    EXPECT_NE(e.message().find("gpus: "), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("whole number of GPUs"), std::string::npos) << e.message();
  }
  const Error e =
      testing::expect_error([] { render_context(json::parse(R"({"worker": {"gpus": "x"}})")); });
  EXPECT_NE(e.message().find("worker.gpus: \"x\""), std::string::npos) << e.message();
}

TEST(RenderTfJob, FullValues) {
  json v = kBase;
  v["ps"] = {{"replicas", 2}, {"cpu", 4}, {"gpus", 0}};
  v["chief"] = 1;
  v["cleanPodPolicy"] = "Running";
  v["backoffLimit"] = 0;
  json job = render_parsed("tfjob", v);
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v1");
  EXPECT_EQ(job["kind"], "TFJob");
  EXPECT_EQ(job["metadata"]["name"], "mnist");
  EXPECT_EQ(job["metadata"]["namespace"], "team-a");
  EXPECT_EQ(job["metadata"]["labels"], json::parse(R"({"team":"a"})"));
  EXPECT_EQ(job["metadata"]["annotations"]["sidecar.istio.io/inject"], "false");
  const json& specs = job["spec"]["tfReplicaSpecs"];
  EXPECT_EQ(specs.size(), 3u);  // no Evaluator
  EXPECT_EQ(specs["Worker"]["replicas"], 4);
  EXPECT_EQ(specs["PS"]["replicas"], 2);
  EXPECT_EQ(specs["Chief"]["replicas"], 1);
  const json& worker = specs["Worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(worker["name"], "tensorflow");
  EXPECT_EQ(worker["image"], "registry/train:1.2");
  EXPECT_EQ(worker["command"], json::parse(R"(["python","train.py","--epochs=3"])"));
  EXPECT_EQ(worker["env"], json::parse(R"([{"name":"LR","value":"0.1"},
                                           {"name":"SEED","value":"7"}])"));
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"], 8);
  EXPECT_EQ(worker["resources"]["requests"]["memory"], "64Gi");
  const json& ps = specs["PS"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(ps["resources"]["limits"], json::parse(R"({"cpu":"4","memory":"64Gi"})"));
  EXPECT_EQ(specs["PS"]["template"]["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(job["spec"]["runPolicy"], json::parse(R"({
      "cleanPodPolicy": "Running", "backoffLimit": 0,
      "schedulingPolicy": {"queue": "team-a", "minAvailable": 5, "priorityClass": "high"}})"));
}

TEST(RenderTfJob, OptionalSectionsAbsentWhenUnset) {
  json job = render_parsed("tfjob", json::parse(R"({"name":"j","image":"i","ps":0})"));
  EXPECT_FALSE(job["metadata"].contains("namespace"));
  EXPECT_FALSE(job["metadata"].contains("labels"));
  EXPECT_FALSE(job["spec"].contains("runPolicy"));
  ASSERT_EQ(job["spec"]["tfReplicaSpecs"].size(), 1u);
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"], 1);  // default
  const json& pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"];
  EXPECT_FALSE(pod["metadata"].contains("labels"));
  for (const char* key :
       {"hostNetwork", "nodeSelector", "tolerations", "volumes", "imagePullSecrets"})
    EXPECT_FALSE(pod["spec"].contains(key)) << key;
  const json& c = pod["spec"]["containers"][0];
  EXPECT_EQ(c, json::parse(R"({"name":"tensorflow","image":"i"})"));
}

TEST(RenderTfJob, EvaluatorAndPodLevelSettings) {
  json v = json::parse(R"({"name":"j","image":"i","evaluator":1,"workers":0,"hostNetwork":true,
      "nodeSelector":{"pool":"a100"},"tolerations":[{"key":"gpu","operator":"Exists"}],
      "imagePullSecrets":["regcred"],"volumes":["data:/data",{"pvc":"ckpt","mount":"/ckpt",
      "readOnly":true}],"workingDir":"/w","restartPolicy":"OnFailure",
      "activeDeadlineSeconds":3600,"ttlSecondsAfterFinished":60})");
  json job = render_parsed("tfjob", v);
  const json& specs = job["spec"]["tfReplicaSpecs"];
  ASSERT_EQ(specs.size(), 1u);
  EXPECT_EQ(specs["Evaluator"]["restartPolicy"], "OnFailure");
  const json& pod = specs["Evaluator"]["template"]["spec"];
  EXPECT_EQ(pod["hostNetwork"], true);
  EXPECT_EQ(pod["nodeSelector"]["pool"], "a100");
  EXPECT_EQ(pod["tolerations"][0]["operator"], "Exists");
  EXPECT_EQ(pod["imagePullSecrets"], json::parse(R"([{"name":"regcred"}])"));
  EXPECT_EQ(pod["volumes"], json::parse(R"([
      {"name":"vol-0","persistentVolumeClaim":{"claimName":"data"}},
      {"name":"vol-1","persistentVolumeClaim":{"claimName":"ckpt","readOnly":true}}])"));
  EXPECT_EQ(pod["containers"][0]["volumeMounts"], json::parse(R"([
      {"name":"vol-0","mountPath":"/data"},{"name":"vol-1","mountPath":"/ckpt","readOnly":true}])"));
  EXPECT_EQ(pod["containers"][0]["workingDir"], "/w");
  EXPECT_EQ(job["spec"]["runPolicy"],
            json::parse(R"({"activeDeadlineSeconds":3600,"ttlSecondsAfterFinished":60})"));
}

TEST(RenderTfJob, VolumeStringsTakeAReadOnlyOrReadWriteMode) {
  json v = json::parse(R"({"name":"j","image":"i",
      "volumes":["data:/data:ro","ckpt:/ckpt:rw","out:/out"]})");
  const json pod =
      render_parsed("tfjob", v)["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"];
  EXPECT_EQ(pod["containers"][0]["volumeMounts"], json::parse(R"([
      {"name":"vol-0","mountPath":"/data","readOnly":true},{"name":"vol-1","mountPath":"/ckpt"},
      {"name":"vol-2","mountPath":"/out"}])"));
  EXPECT_EQ(pod["volumes"][0]["persistentVolumeClaim"],
            json::parse(R"({"claimName":"data","readOnly":true})"));
  const Error e = testing::expect_error(
      [] { render_context(json::parse(R"({"volumes":["data:/data","x:/mnt:rx"]})")); });
  EXPECT_EQ(e.kind(), ErrorKind::Validation);
  EXPECT_EQ(e.message(), "volumes[1]: mode \"rx\" in \"x:/mnt:rx\" is not ro or rw");
}

TEST(RenderPyTorchJob, NprocPerNodeCountIsSpelledAsTheApisString) {
  json v = kBase;
  v["nprocPerNode"] = 4;  // as --set nprocPerNode=4 types it
  EXPECT_EQ(render_parsed("pytorchjob", v)["spec"]["nprocPerNode"], "4");
}

TEST(RenderPyTorchJob, MasterPlusWorkersMinusOne) {
  json v = kBase;
  v["nprocPerNode"] = "auto";
  json job = render_parsed("pytorchjob", v);
  EXPECT_EQ(job["kind"], "PyTorchJob");
  const json& specs = job["spec"]["pytorchReplicaSpecs"];
  EXPECT_EQ(specs["Master"]["replicas"], 1);
  EXPECT_EQ(specs["Worker"]["replicas"], 3);
  EXPECT_EQ(job["spec"]["nprocPerNode"], "auto");
  EXPECT_FALSE(job["spec"].contains("elasticPolicy"));
  for (const char* role : {"Master", "Worker"}) {
    const json& c = specs[role]["template"]["spec"]["containers"][0];
    EXPECT_EQ(c["name"], "pytorch");
    EXPECT_EQ(c["image"], "registry/train:1.2");
  }
  EXPECT_EQ(job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"], 5);
}

TEST(RenderPyTorchJob, OneWorkerIsMasterOnly) {
  json job = render_parsed("pytorchjob", json::parse(R"({"name":"j","image":"i","workers":1})"));
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"].size(), 1u);
  EXPECT_EQ(job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"], 1);
}

TEST(RenderPyTorchJob, ElasticJobsAreAllWorkers) {
  json job = render_parsed("pytorchjob", json::parse(R"({"name":"j","image":"i","workers":4,
      "elasticPolicy":{"minReplicas":2,"maxReplicas":4,"rdzvBackend":"c10d"}})"));
  const json& specs = job["spec"]["pytorchReplicaSpecs"];
  EXPECT_FALSE(specs.contains("Master"));
  EXPECT_EQ(specs["Worker"]["replicas"], 4);
  EXPECT_EQ(job["spec"]["elasticPolicy"]["maxReplicas"], 4);
}

TEST(RenderMpiJob, LauncherAndWorkers) {
  json v = kBase;
  v["mpiImplementation"] = "OpenMPI";
  v["worker"] = {{"command", {"/usr/sbin/sshd", "-De"}}};
  json job = render_parsed("mpijob", v);
  EXPECT_EQ(job["apiVersion"], "kubeflow.org/v2beta1");
  EXPECT_EQ(job["kind"], "MPIJob");
  EXPECT_EQ(job["spec"]["slotsPerWorker"], 8);  // from gpus
  EXPECT_EQ(job["spec"]["mpiImplementation"], "OpenMPI");
  const json& specs = job["spec"]["mpiReplicaSpecs"];
  EXPECT_EQ(specs["Launcher"]["replicas"], 1);
  EXPECT_EQ(specs["Worker"]["replicas"], 4);
  const json& launcher = specs["Launcher"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(launcher["name"], "mpi-launcher");
  EXPECT_EQ(launcher["command"], kBase["command"]);
  EXPECT_FALSE(launcher["resources"]["limits"].contains("nvidia.com/gpu"));
  const json& worker = specs["Worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(worker["name"], "mpi-worker");
  EXPECT_EQ(worker["command"], json::parse(R"(["/usr/sbin/sshd","-De"])"));
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"], 8);
}

TEST(RenderMpiJob, WorkersDoNotInheritTheLauncherCommand) {
  json job = render_parsed("mpijob", json::parse(R"({"name":"j","image":"i","slotsPerWorker":2,
      "command":["mpirun","python","x.py"]})"));
  EXPECT_EQ(job["spec"]["slotsPerWorker"], 2);
  const json& worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"];
  EXPECT_FALSE(worker["containers"][0].contains("command"));
}

TEST(Render, YamlHostileStringsRoundTrip) {
  const std::string hostile[] = {"a: b",
                                 "x # not a comment",
                                 "\"quoted\" and 'single'",
                                 "- dash",
                                 "{braces}: [x]",
                                 "multi\nline\ttab \\ back",
                                 "true",
                                 "0123",
                                 "null",
                                 "* & ! | > % @ `",
                                 "ü→"};
  json v = json::parse(R"({"name":"j","image":"i","labels":{"k: #":"v: #"}})");
  for (size_t i = 0; i < std::size(hostile); ++i)
    v["env"].push_back({{"name", "V" + std::to_string(i)}, {"value", hostile[i]}});
  v["command"] = json::array({"sh", "-c", "echo \"$X\" # {{x}}"});
  v["workingDir"] = "/a: b #c";
  for (const char* kind : {"tfjob", "pytorchjob", "mpijob"}) {
    json job = render_parsed(kind, v);
    std::string top = std::string(kind) == "tfjob"        ? "tfReplicaSpecs"
                      : std::string(kind) == "pytorchjob" ? "pytorchReplicaSpecs"
                                                          : "mpiReplicaSpecs";
    std::string role = std::string(kind) == "mpijob"       ? "Launcher"
                       : std::string(kind) == "pytorchjob" ? "Master"
                                                           : "Worker";
    const json& c = job["spec"][top][role]["template"]["spec"]["containers"][0];
    for (size_t i = 0; i < std::size(hostile); ++i)
      EXPECT_EQ(c["env"][i]["value"], hostile[i]) << kind;
    EXPECT_EQ(c["command"], v["command"]) << kind;
    EXPECT_EQ(c["workingDir"], "/a: b #c") << kind;
    EXPECT_EQ(job["metadata"]["labels"]["k: #"], "v: #") << kind;
  }
}

TEST(Render, TemplateTextInValuesIsNotExpanded) {
  std::string out = render_template("v: {{v}}\n", json{{"v", "{{name}}"}, {"name", "x"}}, "t");
  EXPECT_EQ(out, "v: \"{{name}}\"\n");
}

TEST(Render, SpellingRules) {
  json v = json::parse(R"({"s":"a","n":0,"f":false,"e":"","o":{},"l":[1,"x"],"t":true})");
  EXPECT_EQ(render_template("{{s}}|{{{s}}}|{{json:n}}|{{json:f}}|{{json:e}}|{{json:o}}|{{json:l}}",
                            v, "t"),
            "\"a\"|\"a\"|0|false|\"\"|{}|[1, \"x\"]");
  EXPECT_EQ(render_template("{{#n}}N{{/n}}{{#f}}F{{/f}}{{#e}}E{{/e}}{{#o}}O{{/o}}{{#t}}T{{/t}}"
                            "{{#json:n}}set{{/json:n}}{{#l}}[{{.}}]{{/l}}{{^missing}}M{{/missing}}",
                            v, "t"),
            "Tset[1][\"x\"]M");
}

TEST(Render, StandaloneSectionLinesLeaveNoBlankLines) {
  EXPECT_EQ(render_template("a: 1\n{{#x}}\nb: {{x}}\n{{/x}}\n{{! note\n more }}\nc: 3\n",
                            json{{"x", 2}}, "t"),
            "a: 1\nb: 2\nc: 3\n");
  for (const char* kind : {"tfjob", "pytorchjob", "mpijob"})
    EXPECT_EQ(render_kind(kind, kBase).find("\n\n"), std::string::npos) << kind;
}

TEST(Render, DeterministicOutput) {
  json v = kBase;
  v["nodeSelector"] = {{"z", "1"}, {"a", "2"}, {"m", "3"}};
  for (const char* kind : {"tfjob", "pytorchjob", "mpijob"}) {
    std::string first = render_kind(kind, v);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(render_kind(kind, v), first) << kind;
    EXPECT_NE(first.find(R"({"a": "2", "m": "3", "z": "1"})"), std::string::npos) << first;
  }
}

TEST(Render, TemplateErrorsNameTemplateAndLine) {
  try {
    render_template("a: 1\nb: {{#open}}\nc: 2\n", json::object(), "mine");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Validation);
    EXPECT_NE(e.message().find("template mine:2:"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("open"), std::string::npos) << e.message();
  }
  try {
    render_template("a: 1\n\n{{/close}}\n", json::object(), "other");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("template other:3:"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace trainctl::render

namespace trainctl::render {
namespace {

// Found by fuzz_render: a values file whose string is not UTF-8 made the JSON dump of the value
// throw past every caller and abort. Rendering refuses such values with the path and the byte.
TEST(RenderTemplateTest, ValuesNotUtf8OrWithControlCharactersAreAUsageErrorNamingTheValue) {
  const nlohmann::json values = {{"command", {"python", "--lr=0.\xc8 # x"}}};
  try {
    render_template("c: {{json:command}}\n", values, "t");
    FAIL() << "rendered a value that is not UTF-8";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_EQ(e.message(), "value command[1]: invalid UTF-8 byte 0xc8 at offset 7");
  }
  // Also found by fuzz_render: DEL survives the JSON spelling, and YAML refuses it.
  try {
    render_template("i: {{image}}\n", {{"image", "pt:2\x02im\x7f"}}, "t");
    FAIL() << "rendered a value with control characters";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "value image: control character 0x02 at offset 4");
  }
}

}  // namespace
}  // namespace trainctl::render
