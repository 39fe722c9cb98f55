#include "api/job.h"

#include <gtest/gtest.h>

#include "api/manifest.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

json defaulted(std::string_view yaml) {
  json job = parse_manifests(yaml, "job.yaml").at(0).object;
  apply_defaults(job);
  return job;
}

TEST(JobKinds, FactsMatchTheKubeflowOperators) {
  const auto& tf = job_kind_info(JobKind::TFJob);
  EXPECT_EQ(tf.api_version, "kubeflow.org/v1");
  EXPECT_EQ(tf.plural, "tfjobs");
  EXPECT_EQ(tf.replica_specs_field, "tfReplicaSpecs");
  EXPECT_EQ(tf.default_container, "tensorflow");
  EXPECT_EQ(tf.default_port_name, "tfjob-port");
  EXPECT_EQ(tf.default_port, 2222);
  const auto& pt = job_kind_info(JobKind::PyTorchJob);
  EXPECT_EQ(pt.replica_specs_field, "pytorchReplicaSpecs");
  EXPECT_EQ(pt.default_container, "pytorch");
  EXPECT_EQ(pt.default_port, 23456);
  const auto& mpi = job_kind_info(JobKind::MPIJob);
  EXPECT_EQ(mpi.api_version, "kubeflow.org/v2beta1");
  EXPECT_EQ(mpi.replica_specs_field, "mpiReplicaSpecs");
  EXPECT_EQ(mpi.default_container, "");
  EXPECT_EQ(job_kind_from_name("PyTorchJob"), JobKind::PyTorchJob);
  EXPECT_EQ(job_kind_from_name("pytorchjob"), std::nullopt);
  EXPECT_EQ(job_kinds().size(), 3u);
}

TEST(JobKinds, ReplicaTypesAreMatchedInAnyCase) {
  EXPECT_EQ(canonical_replica_type(JobKind::TFJob, "ps"), "PS");
  EXPECT_EQ(canonical_replica_type(JobKind::TFJob, "WORKER"), "Worker");
  EXPECT_EQ(canonical_replica_type(JobKind::TFJob, "evaluator"), "Evaluator");
  EXPECT_EQ(canonical_replica_type(JobKind::PyTorchJob, "chief"), std::nullopt);
  EXPECT_EQ(canonical_replica_type(JobKind::MPIJob, "launcher"), "Launcher");
}

TEST(JobKinds, NprocPerNodeTakesWhatTorchrunTakes) {
  for (const char* ok : {"auto", "cpu", "gpu", "1", "8", "16"})
    EXPECT_TRUE(is_nproc_per_node(ok)) << ok;
  for (const char* bad : {"", "many", "0", "00", "-1", "2.5", "Auto", " 4", "4 ", "1234567890"})
    EXPECT_FALSE(is_nproc_per_node(bad)) << bad;
}

TEST(ApplyDefaults, TFJob) {
  const json job = defaulted(R"(
kind: TFJob
spec:
  tfReplicaSpecs:
    ps:
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
    worker:
      replicas: 3
      restartPolicy: OnFailure
      template: {spec: {containers: [{name: tensorflow, image: tf}]}}
)");
  const json& specs = job["spec"]["tfReplicaSpecs"];
  ASSERT_TRUE(specs.contains("PS"));
  ASSERT_TRUE(specs.contains("Worker"));
  EXPECT_FALSE(specs.contains("ps"));
  EXPECT_EQ(specs["PS"]["replicas"], 1);
  EXPECT_EQ(specs["PS"]["restartPolicy"], "Never");
  EXPECT_EQ(specs["Worker"]["replicas"], 3);
  EXPECT_EQ(specs["Worker"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(specs["PS"]["template"]["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name":"tfjob-port","containerPort":2222}])"));
  EXPECT_EQ(job["spec"]["runPolicy"]["cleanPodPolicy"], "None");
}

TEST(ApplyDefaults, PyTorchJob) {
  const json job = defaulted(R"(
kind: PyTorchJob
spec:
  runPolicy: {cleanPodPolicy: All}
  pytorchReplicaSpecs:
    Master:
      template: {spec: {containers: [{name: sidecar, image: s}, {name: pytorch, image: pt}]}}
)");
  const json& master = job["spec"]["pytorchReplicaSpecs"]["Master"];
  EXPECT_EQ(master["restartPolicy"], "OnFailure");
  EXPECT_EQ(master["replicas"], 1);
  // The port goes to the container named pytorch, not the first one.
  EXPECT_FALSE(master["template"]["spec"]["containers"][0].contains("ports"));
  EXPECT_EQ(master["template"]["spec"]["containers"][1]["ports"][0]["containerPort"], 23456);
  EXPECT_EQ(job["spec"]["nprocPerNode"], "auto");
  EXPECT_EQ(job["spec"]["runPolicy"]["cleanPodPolicy"], "All");
}

TEST(ApplyDefaults, PyTorchElasticPolicyBoundsFollowTheWorkers) {
  const json job = defaulted(R"(
kind: PyTorchJob
spec:
  elasticPolicy: {nProcPerNode: 2}
  pytorchReplicaSpecs:
    Worker: {replicas: 4, template: {spec: {containers: [{name: pytorch, image: pt}]}}}
)");
  EXPECT_EQ(job["spec"]["elasticPolicy"]["minReplicas"], 4);
  EXPECT_EQ(job["spec"]["elasticPolicy"]["maxReplicas"], 4);
  EXPECT_FALSE(job["spec"].contains("nprocPerNode")) << "elasticPolicy.nProcPerNode is set";
}

TEST(ApplyDefaults, PortIsNotAddedTwice) {
  const json job = defaulted(R"(
kind: TFJob
spec:
  tfReplicaSpecs:
    Worker:
      template:
        spec:
          containers:
          - name: tensorflow
            image: tf
            ports: [{name: tfjob-port, containerPort: 3333}]
)");
  EXPECT_EQ(job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"],
            json::parse(R"([{"name":"tfjob-port","containerPort":3333}])"));
}

TEST(ApplyDefaults, MPIJobFollowsTheV2beta1Operator) {
  const json job = defaulted(R"(
kind: MPIJob
spec:
  mpiReplicaSpecs:
    launcher:
      template: {spec: {containers: [{name: l, image: mpi}]}}
    Worker:
      template: {spec: {containers: [{name: w, image: mpi}]}}
)");
  const json& spec = job["spec"];
  EXPECT_EQ(spec["mpiReplicaSpecs"]["Launcher"]["replicas"], 1);
  EXPECT_EQ(spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(spec["mpiReplicaSpecs"]["Worker"]["replicas"], 0);
  EXPECT_EQ(spec["mpiReplicaSpecs"]["Worker"]["restartPolicy"], "Never");
  EXPECT_FALSE(
      spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].contains("ports"));
  EXPECT_EQ(spec["slotsPerWorker"], 1);
  EXPECT_EQ(spec["sshAuthMountPath"], "/root/.ssh");
  EXPECT_EQ(spec["mpiImplementation"], "OpenMPI");
  EXPECT_EQ(spec["launcherCreationPolicy"], "AtStartup");
  EXPECT_EQ(spec["runPolicy"]["cleanPodPolicy"], "None");
}

TEST(ApplyDefaults, UnknownFieldsPassThroughAndSecondRunChangesNothing) {
  json job = defaulted(R"(
kind: TFJob
metadata: {name: t, labels: {team: a}}
spec:
  futureField: {x: 1}
  tfReplicaSpecs:
    Worker:
      someOperatorExtension: true
      template:
        metadata: {annotations: {a: b}}
        spec:
          schedulerName: custom
          containers: [{name: tensorflow, image: tf, tty: true}]
)");
  EXPECT_EQ(job["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(job["spec"]["futureField"]["x"], 1);
  const json& worker = job["spec"]["tfReplicaSpecs"]["Worker"];
  EXPECT_EQ(worker["someOperatorExtension"], true);
  EXPECT_EQ(worker["template"]["metadata"]["annotations"]["a"], "b");
  EXPECT_EQ(worker["template"]["spec"]["schedulerName"], "custom");
  EXPECT_EQ(worker["template"]["spec"]["containers"][0]["tty"], true);
  const json once = job;
  apply_defaults(job);
  EXPECT_EQ(job, once);
}

TEST(ApplyDefaults, LeavesUnknownKindsAndMalformedObjectsAlone) {
  json other = json::parse(R"({"kind":"Deployment","spec":{}})");
  apply_defaults(other);
  EXPECT_EQ(other, json::parse(R"({"kind":"Deployment","spec":{}})"));
  json bad = json::parse(
      R"({"kind":"TFJob","spec":{"tfReplicaSpecs":{"Worker":{"template":{"spec":{"containers":"x"}}}}}})");
  EXPECT_NO_THROW(apply_defaults(bad));
  EXPECT_EQ(bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"], "x");
  json not_spec = json::parse(R"({"kind":"TFJob","spec":"oops"})");
  EXPECT_NO_THROW(apply_defaults(not_spec));
  EXPECT_EQ(not_spec["spec"], "oops");
}

}  // namespace
}  // namespace trainctl::api
