#include "api/validation.h"

#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::api {
namespace {

/// The message validate_job throws for the first document of `yaml`, or "valid".
std::string problems_of(std::string_view yaml) {
  const auto manifests = parse_manifests(yaml, "job.yaml");
  try {
    validate_job(manifests.at(0));
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Validation);
    EXPECT_EQ(exit_code(e.kind()), 2);
    return e.message();
  }
  return "valid";
}

struct ValidationCase {
  const char* name;
  const char* yaml;
  const char* message;
};

void PrintTo(const ValidationCase& c, std::ostream* out) {
  *out << c.name;
}

class ValidationTable : public ::testing::TestWithParam<ValidationCase> {};

TEST_P(ValidationTable, ReportsFileLineFieldAndReason) {
  EXPECT_EQ(problems_of(GetParam().yaml), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Jobs, ValidationTable,
    ::testing::Values(
        ValidationCase{"ValidTFJob", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  runPolicy: {cleanPodPolicy: Running, backoffLimit: 3, schedulingPolicy: {minAvailable: 3}}
  tfReplicaSpecs:
    ps:
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
    Chief:
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources: {requests: {cpu: 100m, memory: 2Gi}, limits: {cpu: 1.5, nvidia.com/gpu: 8}}
)",
                       "valid"},
        ValidationCase{"ValidPyTorchJob", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {generateName: ddp-}
spec:
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)",
                       "valid"},
        ValidationCase{"ValidMPIJob", R"(apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: horovod}
spec:
  mpiReplicaSpecs:
    Launcher: {template: {spec: {containers: [{name: launcher, image: mpi}]}}}
    Worker: {replicas: 4, template: {spec: {containers: [{name: worker, image: mpi}]}}}
)",
                       "valid"},
        ValidationCase{"UnknownKind",
                       "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
                       "job.yaml:2: kind: unsupported kind \"Deployment\"; supported kinds: TFJob "
                       "(kubeflow.org/v1), PyTorchJob (kubeflow.org/v1), MPIJob "
                       "(kubeflow.org/v2beta1)"},
        ValidationCase{"MissingKind", "metadata: {name: d}\n",
                       "job.yaml:1: kind: required; supported kinds: TFJob (kubeflow.org/v1), "
                       "PyTorchJob (kubeflow.org/v1), MPIJob (kubeflow.org/v2beta1)"},
        ValidationCase{"WrongApiVersion", R"(apiVersion: kubeflow.org/v1
kind: MPIJob
metadata: {name: m}
spec:
  mpiReplicaSpecs:
    Launcher: {template: {spec: {containers: [{name: l, image: mpi}]}}}
)",
                       "job.yaml:1: apiVersion: must be kubeflow.org/v2beta1 for MPIJob, got "
                       "\"kubeflow.org/v1\""},
        ValidationCase{"NegativeReplicas", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
spec:
  tfReplicaSpecs:
    Worker:
      replicas: -1
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
)",
                       "job.yaml:8: spec.tfReplicaSpecs.Worker.replicas: must be >= 0"},
        ValidationCase{"ReplicasNotAnInteger", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist}
spec:
  tfReplicaSpecs:
    worker:
      replicas: "2"
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
)",
                       "job.yaml:7: spec.tfReplicaSpecs.Worker.replicas: must be an integer, got "
                       "\"2\""},
        ValidationCase{"UnknownReplicaType", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  pytorchReplicaSpecs:
    Chief: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)",
                       "job.yaml:6: spec.pytorchReplicaSpecs.Chief: unknown replica type "
                       "\"Chief\": PyTorchJob allows Master, Worker"},
        ValidationCase{"CaseVariantDuplicate", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
    worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:7: spec.tfReplicaSpecs.worker: duplicates Worker: replica types "
                       "are case-insensitive"},
        ValidationCase{"NoReplicaSpecs",
                       "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: "
                       "{name: t}\nspec:\n  runPolicy: {}\n",
                       "job.yaml:4: spec.tfReplicaSpecs: required: at least one replica spec "
                       "(Chief, Master, PS, Worker, Evaluator)"},
        ValidationCase{"ChiefAndMaster", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Chief: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
    Master: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:7: spec.tfReplicaSpecs.Master: Chief and Master cannot both be "
                       "set: a TFJob has at most one chief"},
        ValidationCase{"TwoChiefReplicas", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Chief:
      replicas: 2
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
)",
                       "job.yaml:7: spec.tfReplicaSpecs.Chief.replicas: must be 0 or 1: a TFJob "
                       "has at most one chief"},
        ValidationCase{"PyTorchMasterReplicas", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  pytorchReplicaSpecs:
    master:
      replicas: 2
      template: {spec: {containers: [{name: pytorch, image: pt}]}}
)",
                       "job.yaml:7: spec.pytorchReplicaSpecs.Master.replicas: must be 1: a "
                       "PyTorchJob has exactly one master"},
        ValidationCase{"PyTorchNprocPerNodeNumber", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  nprocPerNode: 4
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)",
                       "job.yaml:5: spec.nprocPerNode: must be a string (\"auto\", \"cpu\", "
                       "\"gpu\" or a count such as \"4\"), got 4"},
        ValidationCase{"PyTorchNprocPerNodeNotACount", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  nprocPerNode: many
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)",
                       "job.yaml:5: spec.nprocPerNode: must be a string (\"auto\", \"cpu\", "
                       "\"gpu\" or a count such as \"4\"), got \"many\""},
        ValidationCase{"MPIWithoutLauncher", R"(apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: m}
spec:
  mpiReplicaSpecs:
    Worker: {replicas: 2, template: {spec: {containers: [{name: w, image: mpi}]}}}
)",
                       "job.yaml:5: spec.mpiReplicaSpecs.Launcher: required: an MPIJob needs "
                       "exactly one launcher"},
        ValidationCase{"MPITwoLaunchers", R"(apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: m}
spec:
  mpiImplementation: LAM
  mpiReplicaSpecs:
    Launcher:
      replicas: 2
      template: {spec: {containers: [{name: l, image: mpi}]}}
)",
                       "job.yaml:5: spec.mpiImplementation: unsupported value \"LAM\": must be one "
                       "of OpenMPI, Intel, MPICH\n"
                       "job.yaml:8: spec.mpiReplicaSpecs.Launcher.replicas: must be 1: an MPIJob "
                       "has exactly one launcher"},
        ValidationCase{"NoTemplate", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 1
)",
                       "job.yaml:6: spec.tfReplicaSpecs.Worker.template: required: a pod template "
                       "with spec.containers"},
        ValidationCase{"NoContainers", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers: []
)",
                       "job.yaml:9: spec.tfReplicaSpecs.Worker.template.spec.containers: at least "
                       "one container is required"},
        ValidationCase{"NoDefaultContainer", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: main
            image: tf
)",
                       "job.yaml:9: spec.tfReplicaSpecs.Worker.template.spec.containers: no "
                       "container named \"tensorflow\": the TFJob operator runs the container of "
                       "that name"},
        ValidationCase{"MissingImage", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: ddp}
spec:
  pytorchReplicaSpecs:
    Master:
      template:
        spec:
          containers:
          - name: pytorch
            image: ""
)",
                       "job.yaml:11: spec.pytorchReplicaSpecs.Master.template.spec.containers[0]."
                       "image: required: every container needs an image"},
        ValidationCase{"BadRestartPolicy", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      restartPolicy: Sometimes
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
)",
                       "job.yaml:7: spec.tfReplicaSpecs.Worker.restartPolicy: unsupported value "
                       "\"Sometimes\": must be one of Always, OnFailure, Never, ExitCode"},
        ValidationCase{"BadQuantity", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources:
              limits:
                memory: 2GB
)",
                       "job.yaml:14: spec.tfReplicaSpecs.Worker.template.spec.containers[0]."
                       "resources.limits.memory: invalid quantity \"2GB\": use a number with an "
                       "optional suffix such as 100m, 1.5, 2Gi or 500M"},
        ValidationCase{"RequestOverLimit", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources:
              requests: {cpu: "4"}
              limits: {cpu: 2}
)",
                       "job.yaml:13: spec.tfReplicaSpecs.Worker.template.spec.containers[0]."
                       "resources.requests.cpu: must be less than or equal to the cpu limit (2)"},
        // What the API server refuses in a pod, which left the job's pods uncreated: a GPU
        // request without a limit (or unlike it), a fraction of a device, a bad env name.
        ValidationCase{"GpuRequestWithoutLimit", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources:
              requests: {nvidia.com/gpu: 1, cpu: 1}
)",
                       "job.yaml:13: spec.tfReplicaSpecs.Worker.template.spec.containers[0]."
                       "resources.requests.nvidia.com/gpu: needs limits.nvidia.com/gpu as well, "
                       "of the same amount: Kubernetes refuses a nvidia.com/gpu request without "
                       "a limit (setting the limit alone is enough)"},
        ValidationCase{"GpuRequestUnlikeItsLimit", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            resources:
              requests: {nvidia.com/gpu: 1}
              limits: {nvidia.com/gpu: 2, hugepages-2Mi: 2Mi, example.com/fpga: 500m}
)",
                       "job.yaml:13: spec.tfReplicaSpecs.Worker.template.spec.containers[0]."
                       "resources.requests.nvidia.com/gpu: must equal the nvidia.com/gpu limit "
                       "(2): Kubernetes does not overcommit it\n"
                       "job.yaml:14: spec.tfReplicaSpecs.Worker.template.spec.containers[0]."
                       "resources.limits.example.com/fpga: must be a whole number, got \"500m\": "
                       "example.com/fpga is counted in whole devices"},
        ValidationCase{"EnvNameStartingWithADigit", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            env: [{name: 1BAD, value: x}, {name: _ok.x-1, value: y}]
)",
                       "job.yaml:12: spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0]"
                       ".name: \"1BAD\" is not a valid environment variable name: use letters, "
                       "digits, '_', '-' or '.', not starting with a digit"},
        ValidationCase{"RunPolicy", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: t}
spec:
  runPolicy:
    cleanPodPolicy: Sometimes
    ttlSecondsAfterFinished: -5
    activeDeadlineSeconds: 1.5
    backoffLimit: -1
    schedulingPolicy:
      minAvailable: -2
      minResources: {cpu: lots}
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:6: spec.runPolicy.cleanPodPolicy: unsupported value "
                       "\"Sometimes\": must be one of None, Running, All\n"
                       "job.yaml:7: spec.runPolicy.ttlSecondsAfterFinished: must be >= 0\n"
                       "job.yaml:8: spec.runPolicy.activeDeadlineSeconds: must be an integer, got "
                       "1.5\n"
                       "job.yaml:9: spec.runPolicy.backoffLimit: must be >= 0\n"
                       "job.yaml:11: spec.runPolicy.schedulingPolicy.minAvailable: must be >= 0\n"
                       "job.yaml:12: spec.runPolicy.schedulingPolicy.minResources.cpu: invalid "
                       "quantity \"lots\": use a number with an optional suffix such as 100m, "
                       "1.5, 2Gi or 500M"},
        ValidationCase{"NoName", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  labels: {a: b}
spec:
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:3: metadata.name: required (or metadata.generateName)"},
        ValidationCase{"LabelsTheServerRefuses", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
  labels:
    team: ml
    a: b=c
spec:
  tfReplicaSpecs:
    Worker:
      template:
        metadata:
          labels: {a: b=c}
          annotations: {"bad key": x}
        spec: {containers: [{name: tensorflow, image: tf}]}
)",
                       "job.yaml:7: metadata.labels: Invalid value: \"b=c\": a valid label must "
                       "be an empty string or consist of alphanumeric characters, '-', '_' or "
                       "'.', and must start and end with an alphanumeric character (e.g. "
                       "'MyValue',  or 'my_value',  or '12345', regex used for validation is "
                       "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')\n"
                       "job.yaml:13: spec.tfReplicaSpecs.Worker.template.metadata.labels: Invalid "
                       "value: \"b=c\": a valid label must be an empty string or consist of "
                       "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                       "alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                       "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                       "\n"
                       "job.yaml:14: spec.tfReplicaSpecs.Worker.template.metadata.annotations: "
                       "Invalid value: \"bad key\": name part must consist of alphanumeric "
                       "characters, '-', '_' or '.', and must start and end with an alphanumeric "
                       "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                       "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"},
        ValidationCase{"LabelAndAnnotationValuesYamlReadsAsNumbersOrBooleans",
                       R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
  labels: {version: 1, quoted: "2", empty: null, nested: {a: b}}
spec:
  tfReplicaSpecs:
    Worker:
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: false}
        spec: {containers: [{name: tensorflow, image: tf}]}
)",
                       "job.yaml:5: metadata.labels: nested: must be a string, not a map\n"
                       "job.yaml:5: metadata.labels: version: must be a string, not a number: "
                       "quote it (\"1\")\n"
                       "job.yaml:11: spec.tfReplicaSpecs.Worker.template.metadata.annotations: "
                       "sidecar.istio.io/inject: must be a string, not a boolean: quote it "
                       "(\"false\")"},
        ValidationCase{"ValidLabelsAndAnnotations", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: mnist
  labels: {app.kubernetes.io/name: mnist, empty: ""}
  annotations: {Example.com/Note: "any text = fine"}
spec:
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "valid"},
        ValidationCase{"NameNotDns1035", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: 1-MNIST}
spec:
  tfReplicaSpecs:
    Worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:3: metadata.name: \"1-MNIST\" is not a valid DNS-1035 label: use "
                       "lowercase letters, digits and '-', starting with a letter and ending with "
                       "a letter or digit"},
        // 50 + "-evaluator-10" (13) = 63 is fine; 11 evaluators make index 10: exactly 63.
        ValidationCase{"NameAtTheLimit", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}
spec:
  tfReplicaSpecs:
    Evaluator: {replicas: 11, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "valid"},
        ValidationCase{"NameTooLongForItsPods", R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa}
spec:
  tfReplicaSpecs:
    Evaluator: {replicas: 11, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
    PS: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: tf}]}}}
)",
                       "job.yaml:3: metadata.name: too long: pod name "
                       "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-evaluator-10\" would "
                       "have 64 characters, over the limit of 63; the name can have at most 50 "
                       "characters"},
        ValidationCase{
            "GenerateNameCountsTheRandomSuffix", R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {generateName: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-}
spec:
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)",
            "job.yaml:3: metadata.generateName: too long: pod name "
            "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-xxxxx-master-0\" would "
            "have 65 characters, over the limit of 63; the name can have at most 49 "
            "characters"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ValidateJob, ListsEveryProblemInFileOrder) {
  EXPECT_EQ(problems_of(R"(apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: Bad_Name}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: -3
      template:
        spec:
          containers:
          - name: tensorflow
          - name: helper
            image: busybox
            resources: {requests: {memory: 1XB}}
    Boss:
      template: {}
)"),
            "job.yaml:3: metadata.name: \"Bad_Name\" is not a valid DNS-1035 label: use "
            "lowercase letters, digits and '-', starting with a letter and ending with a letter "
            "or digit\n"
            "job.yaml:7: spec.tfReplicaSpecs.Worker.replicas: must be >= 0\n"
            "job.yaml:11: spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required: "
            "every container needs an image\n"
            "job.yaml:14: spec.tfReplicaSpecs.Worker.template.spec.containers[1].resources."
            "requests.memory: invalid quantity \"1XB\": use a number with an optional suffix such "
            "as 100m, 1.5, 2Gi or 500M\n"
            "job.yaml:15: spec.tfReplicaSpecs.Boss: unknown replica type \"Boss\": TFJob allows "
            "Chief, Master, PS, Worker, Evaluator");
}

TEST(ValidateJob, LineNumbersCountFromTheStartOfAMultiDocumentFile) {
  const auto manifests = parse_manifests(R"(apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: fine}
spec:
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: pytorch, image: pt}]}}}
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: broken}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: -1
      template: {spec: {containers: [{name: pytorch, image: pt}]}}
)",
                                         "jobs.yaml");
  ASSERT_EQ(manifests.size(), 2u);
  EXPECT_NO_THROW(validate_job(manifests[0]));
  try {
    validate_job(manifests[1]);
    FAIL() << "expected a validation error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "jobs.yaml:14: spec.pytorchReplicaSpecs.Worker.replicas: must be >= 0");
  }
}

TEST(ValidateJob, JsonManifestsGetLinesToo) {
  const auto manifests = parse_manifests(R"({
  "apiVersion": "kubeflow.org/v1",
  "kind": "TFJob",
  "metadata": {"name": "j"},
  "spec": {"tfReplicaSpecs": {"Worker": {
    "template": {"spec": {"containers": [{"name": "tensorflow"}]}}}}}
})",
                                         "job.json");
  try {
    validate_job(manifests.at(0));
    FAIL() << "expected a validation error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(),
              "job.json:6: spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: "
              "required: every container needs an image");
  }
}

TEST(ValidateJob, DoesNotChangeTheManifest) {
  const auto manifests = parse_manifests(
      "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: t}\nspec:\n  tfReplicaSpecs:\n"
      "    worker: {template: {spec: {containers: [{name: tensorflow, image: tf}]}}}\n",
      "job.yaml");
  const auto before = manifests[0].object;
  validate_job(manifests[0]);
  EXPECT_EQ(manifests[0].object, before);
  EXPECT_TRUE(manifests[0].object["spec"]["tfReplicaSpecs"].contains("worker"));
}

}  // namespace
}  // namespace trainctl::api
