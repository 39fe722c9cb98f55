#include "kube/resource.h"

#include <gtest/gtest.h>

#include "error.h"

namespace trainctl::kube {
namespace {

TEST(ResourcePathTest, CoreNamespacedObject) {
  EXPECT_EQ(resource_path(resources::pods(), "team-a", "mnist-worker-0"),
            "/api/v1/namespaces/team-a/pods/mnist-worker-0");
}

TEST(ResourcePathTest, GroupCollectionAndSubresource) {
  EXPECT_EQ(resource_path(resources::job(api::JobKind::TFJob), "default"),
            "/apis/kubeflow.org/v1/namespaces/default/tfjobs");
  EXPECT_EQ(resource_path(resources::job(api::JobKind::TFJob), "default", "mnist", "status"),
            "/apis/kubeflow.org/v1/namespaces/default/tfjobs/mnist/status");
}

TEST(ResourcePathTest, EmptyNamespaceMeansAllNamespaces) {
  EXPECT_EQ(resource_path(resources::pods(), ""), "/api/v1/pods");
}

TEST(ResourcePathTest, ClusterScopedIgnoresNamespace) {
  EXPECT_EQ(resource_path(resources::queues(), "ignored", "team-a"),
            "/apis/scheduling.volcano.sh/v1beta1/queues/team-a");
  EXPECT_EQ(resource_path(resources::nodes(), "x"), "/api/v1/nodes");
}

TEST(ResourcePathTest, RejectsNamesThatEscapeThePath) {
  for (const char* bad : {"..", ".", "a/b", "a%2Fb"}) {
    try {
      resource_path(resources::pods(), "default", bad);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage);
    }
  }
  EXPECT_THROW(resource_path(resources::pods(), "../kube-system", "x"), Error);
}

TEST(QueryTest, EscapesAsGoQueryEscapeAndKeepsOrder) {
  Query q;
  q.add("labelSelector", "app in (a,b),tier!=db").add("command", "sh").add("command", "-c x");
  EXPECT_EQ(q.encode(),
            "?labelSelector=app%20in%20%28a%2Cb%29%2Ctier%21%3Ddb&command=sh&command=-c%20x");
  EXPECT_EQ(Query().encode(), "");
}

TEST(ResourceTest, ApiVersionAndDisplayName) {
  EXPECT_EQ(resources::pods().api_version(), "v1");
  EXPECT_EQ(resources::job(api::JobKind::MPIJob).api_version(), "kubeflow.org/v2beta1");
  EXPECT_EQ(resources::job(api::JobKind::TFJob).display_name(), "tfjobs.kubeflow.org/v1");
}

}  // namespace
}  // namespace trainctl::kube
