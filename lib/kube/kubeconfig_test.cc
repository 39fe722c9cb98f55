#include "kube/kubeconfig.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <functional>
#include <string>

#include "error.h"
#include "tests/support/expect_error.h"
#include "tests/support/temp_dir.h"
#include "text.h"

namespace trainctl::kube {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

KubeconfigViewOptions view_options(bool minify, std::string context = "", bool raw = false) {
  KubeconfigViewOptions options;
  options.minify = minify;
  options.context = std::move(context);
  options.raw = raw;
  return options;
}

class KubeconfigTest : public ::testing::Test {
 protected:
  KubeconfigTest() {
    env_.env["HOME"] = (dir_.path() / "home").string();
    // Never the real service-account directory, even when the tests run inside a pod.
    env_.service_account_dir = dir_.path() / "sa";
  }

  /// Points $KUBECONFIG at the given files (relative to the temp dir), joined with ':'.
  void use_kubeconfigs(std::initializer_list<std::string> files) {
    std::string list;
    for (const auto& f : files)
      list += (list.empty() ? "" : ":") + (dir_.path() / f).string();
    env_.env["KUBECONFIG"] = list;
  }

  RestConfig resolve(const std::string& yaml, ConfigOverrides o = {}) {
    o.kubeconfig = dir_.write("config", yaml).string();
    return resolve_rest_config(o, env_);
  }

  std::string resolve_error(const std::string& yaml, ConfigOverrides o = {}) {
    return testing::config_error([&] { resolve(yaml, o); });
  }

  void make_in_cluster(const std::string& host = "10.96.0.1", const std::string& port = "443") {
    env_.env["KUBERNETES_SERVICE_HOST"] = host;
    env_.env["KUBERNETES_SERVICE_PORT"] = port;
    dir_.write("sa/token", "sa-token\n");
    dir_.write("sa/ca.crt", "IN-CLUSTER-CA");
    dir_.write("sa/namespace", "team-a\n");
  }

  testing::TempDir dir_;
  ConfigEnvironment env_;
};

// A kubeconfig with one context "dev" -> cluster "dev-cluster", user "dev-user".
std::string simple_config(const std::string& user_body = "    token: abc\n",
                          const std::string& cluster_extra = "",
                          const std::string& context_extra = "    namespace: research\n") {
  return "apiVersion: v1\n"
         "kind: Config\n"
         "current-context: dev\n"
         "clusters:\n"
         "- name: dev-cluster\n"
         "  cluster:\n"
         "    server: https://dev.example.com:6443\n" +
         cluster_extra +
         "users:\n"
         "- name: dev-user\n"
         "  user:\n" +
         user_body +
         "contexts:\n"
         "- name: dev\n"
         "  context:\n"
         "    cluster: dev-cluster\n"
         "    user: dev-user\n" +
         context_extra;
}

// ---- where files are looked for ----------------------------------------------------------------

TEST_F(KubeconfigTest, ExplicitKubeconfigIsTheOnlyFileSearched) {
  use_kubeconfigs({"a", "b"});
  ConfigOverrides o;
  o.kubeconfig = (dir_.path() / "explicit").string();
  EXPECT_THAT(kubeconfig_search_paths(o, env_), ElementsAre(dir_.path() / "explicit"));
}

TEST_F(KubeconfigTest, MissingExplicitKubeconfigIsAnErrorNamingIt) {
  ConfigOverrides o;
  o.kubeconfig = (dir_.path() / "nope.yaml").string();
  EXPECT_THAT(testing::config_error([&] { resolve_rest_config(o, env_); }),
              HasSubstr((dir_.path() / "nope.yaml").string()));
}

TEST_F(KubeconfigTest, KubeconfigEnvIsSplitDroppingEmptyEntriesAndDuplicates) {
  const std::string a = (dir_.path() / "a").string();
  const std::string b = (dir_.path() / "b").string();
  env_.env["KUBECONFIG"] = a + "::" + b + ":" + a + ":";
  EXPECT_THAT(kubeconfig_search_paths({}, env_), ElementsAre(dir_.path() / "a", dir_.path() / "b"));
}

TEST_F(KubeconfigTest, HomeKubeConfigIsTheDefault) {
  EXPECT_THAT(kubeconfig_search_paths({}, env_),
              ElementsAre(dir_.path() / "home" / ".kube" / "config"));
}

TEST_F(KubeconfigTest, HomeKubeConfigIsLoadedWhenNothingElseIsSet) {
  dir_.write("home/.kube/config", simple_config());
  EXPECT_EQ(resolve_rest_config({}, env_).server, "https://dev.example.com:6443");
}

TEST_F(KubeconfigTest, MissingFilesInKubeconfigEnvAreSkipped) {
  dir_.write("real", simple_config());
  use_kubeconfigs({"missing", "real"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  EXPECT_THAT(config.files, ElementsAre(dir_.path() / "real"));
  EXPECT_THAT(config.searched, ElementsAre(dir_.path() / "missing", dir_.path() / "real"));
  EXPECT_EQ(resolve_rest_config(config, {}, env_).context_name, "dev");
}

// ---- merging -----------------------------------------------------------------------------------

TEST_F(KubeconfigTest, FirstFileDefiningANameWinsTheWholeEntry) {
  dir_.write("first",
             "clusters:\n"
             "- name: shared\n"
             "  cluster:\n"
             "    server: https://first\n");
  dir_.write("second",
             "clusters:\n"
             "- name: shared\n"
             "  cluster:\n"
             "    server: https://second\n"
             "    insecure-skip-tls-verify: true\n"
             "    tls-server-name: second.internal\n"
             "- name: only-second\n"
             "  cluster:\n"
             "    server: https://only-second\n");
  use_kubeconfigs({"first", "second"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  const auto& shared = config.clusters.at("shared");
  EXPECT_EQ(shared.value.server, "https://first");
  // Fields are not merged across files: the second file's extra fields do not leak in.
  EXPECT_FALSE(shared.value.insecure_skip_tls_verify);
  EXPECT_EQ(shared.value.tls_server_name, "");
  EXPECT_EQ(shared.file, dir_.path() / "first");
  EXPECT_EQ(config.clusters.at("only-second").file, dir_.path() / "second");
}

TEST_F(KubeconfigTest, FirstNonEmptyCurrentContextWins) {
  dir_.write("one", "clusters: []\n");
  dir_.write("two", "current-context: from-two\n");
  dir_.write("three", "current-context: from-three\n");
  use_kubeconfigs({"one", "two", "three"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  EXPECT_EQ(config.current_context, "from-two");
  EXPECT_EQ(config.current_context_file, dir_.path() / "two");
}

TEST_F(KubeconfigTest, DuplicateFileInKubeconfigEnvIsLoadedOnce) {
  dir_.write("a", simple_config());
  use_kubeconfigs({"a", "a"});
  EXPECT_THAT(load_kubeconfig({}, env_).files, ElementsAre(dir_.path() / "a"));
}

TEST_F(KubeconfigTest, EntriesRememberFileAndLine) {
  dir_.write("a", simple_config());
  use_kubeconfigs({"a"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  EXPECT_EQ(config.users.at("dev-user").file, dir_.path() / "a");
  EXPECT_EQ(config.users.at("dev-user").line, 9);
  EXPECT_EQ(config.contexts.at("dev").line, 13);
}

TEST_F(KubeconfigTest, DuplicateNameWithinOneFileIsAnError) {
  const std::string message = resolve_error(
      "clusters:\n"
      "- name: a\n"
      "  cluster: {server: https://x}\n"
      "- name: a\n"
      "  cluster: {server: https://y}\n");
  EXPECT_THAT(message, HasSubstr("config:4: clusters[1].name: duplicate name \"a\""));
}

// ---- relative paths ----------------------------------------------------------------------------

TEST_F(KubeconfigTest, RelativePathsResolveAgainstTheFilesDirectory) {
  dir_.write("nested/certs/ca.pem", "CA");
  dir_.write("nested/certs/client.pem", "CERT");
  dir_.write("nested/certs/client.key", "KEY");
  dir_.write("nested/config",
             "clusters:\n"
             "- name: c\n"
             "  cluster:\n"
             "    server: https://x\n"
             "    certificate-authority: certs/ca.pem\n"
             "users:\n"
             "- name: u\n"
             "  user:\n"
             "    client-certificate: certs/client.pem\n"
             "    client-key: ./certs/client.key\n"
             "    tokenFile: ../token\n"
             "- name: e\n"
             "  user:\n"
             "    exec:\n"
             "      command: bin/plugin\n"
             "- name: p\n"
             "  user:\n"
             "    exec:\n"
             "      command: plugin-on-path\n");
  use_kubeconfigs({"nested/config"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  EXPECT_EQ(config.clusters.at("c").value.certificate_authority,
            (dir_.path() / "nested/certs/ca.pem").string());
  const KubeconfigUser& u = config.users.at("u").value;
  EXPECT_EQ(u.client_certificate, (dir_.path() / "nested/certs/client.pem").string());
  EXPECT_EQ(u.client_key, (dir_.path() / "nested/certs/client.key").string());
  EXPECT_EQ(u.token_file, (dir_.path() / "token").string());
  EXPECT_EQ(config.users.at("e").value.exec->command, (dir_.path() / "nested/bin/plugin").string());
  EXPECT_EQ(config.users.at("p").value.exec->command, "plugin-on-path");
}

TEST_F(KubeconfigTest, RelativeFilesAreReadFromTheFilesDirectory) {
  dir_.write("nested/ca.pem", "THE-CA");
  dir_.write("nested/config",
             simple_config("    token: t\n", "    certificate-authority: ca.pem\n"));
  use_kubeconfigs({"nested/config"});
  EXPECT_EQ(resolve_rest_config({}, env_).tls.ca_pem, "THE-CA");
}

// ---- resolution --------------------------------------------------------------------------------

TEST_F(KubeconfigTest, ResolvesTheCurrentContext) {
  const RestConfig r = resolve(simple_config());
  EXPECT_EQ(r.server, "https://dev.example.com:6443");
  EXPECT_EQ(r.auth.token, "abc");
  EXPECT_EQ(r.default_namespace, "research");
  EXPECT_EQ(r.context_name, "dev");
  EXPECT_EQ(r.cluster_name, "dev-cluster");
  EXPECT_EQ(r.user_name, "dev-user");
  EXPECT_EQ(r.source, (dir_.path() / "config").string());
  EXPECT_FALSE(r.in_cluster);
}

TEST_F(KubeconfigTest, NamespaceComesFromFlagThenContextThenDefault) {
  ConfigOverrides o;
  o.namespace_ = "from-flag";
  EXPECT_EQ(resolve(simple_config(), o).default_namespace, "from-flag");
  EXPECT_EQ(resolve(simple_config()).default_namespace, "research");
  EXPECT_EQ(resolve(simple_config("    token: abc\n", "", "")).default_namespace, "default");
}

TEST_F(KubeconfigTest, InvalidNamespaceIsAnError) {
  ConfigOverrides o;
  o.namespace_ = "Not_Valid";
  EXPECT_THAT(resolve_error(simple_config(), o), HasSubstr("\"Not_Valid\""));
}

const char* kTwoOfEverything =
    "current-context: a\n"
    "clusters:\n"
    "- {name: ca, cluster: {server: https://a}}\n"
    "- {name: cb, cluster: {server: https://b}}\n"
    "users:\n"
    "- {name: ua, user: {token: token-a}}\n"
    "- {name: ub, user: {token: token-b}}\n"
    "contexts:\n"
    "- {name: a, context: {cluster: ca, user: ua, namespace: ns-a}}\n"
    "- {name: b, context: {cluster: cb, user: ub, namespace: ns-b}}\n";

TEST_F(KubeconfigTest, ContextFlagSelectsAnotherContext) {
  ConfigOverrides o;
  o.context = "b";
  const RestConfig r = resolve(kTwoOfEverything, o);
  EXPECT_EQ(r.server, "https://b");
  EXPECT_EQ(r.auth.token, "token-b");
  EXPECT_EQ(r.default_namespace, "ns-b");
  EXPECT_EQ(r.context_name, "b");
}

TEST_F(KubeconfigTest, ClusterAndUserFlagsReplaceTheContextsReferences) {
  ConfigOverrides o;
  o.cluster = "cb";
  const RestConfig by_cluster = resolve(kTwoOfEverything, o);
  EXPECT_EQ(by_cluster.server, "https://b");
  EXPECT_EQ(by_cluster.auth.token, "token-a");
  EXPECT_EQ(by_cluster.cluster_name, "cb");

  ConfigOverrides u;
  u.user = "ub";
  const RestConfig by_user = resolve(kTwoOfEverything, u);
  EXPECT_EQ(by_user.server, "https://a");
  EXPECT_EQ(by_user.auth.token, "token-b");
  EXPECT_EQ(by_user.user_name, "ub");
}

TEST_F(KubeconfigTest, MissingContextListsTheAvailableOnes) {
  ConfigOverrides o;
  o.context = "prod";
  const std::string message = resolve_error(kTwoOfEverything, o);
  EXPECT_THAT(message, HasSubstr("context \"prod\""));
  EXPECT_THAT(message, HasSubstr("\"a\", \"b\""));
}

TEST_F(KubeconfigTest, MissingClusterOrUserListsTheAvailableOnes) {
  ConfigOverrides c;
  c.cluster = "nope";
  EXPECT_THAT(resolve_error(kTwoOfEverything, c),
              HasSubstr("cluster \"nope\" (named by --cluster) not found"));
  EXPECT_THAT(resolve_error(kTwoOfEverything, c), HasSubstr("\"ca\", \"cb\""));

  ConfigOverrides o;
  o.context = "other";
  const std::string message = resolve_error(simple_config("", "",
                                                          "    namespace: x\n"
                                                          "- name: other\n"
                                                          "  context: {cluster: dev-cluster, "
                                                          "user: ghost}\n"),
                                            o);
  EXPECT_THAT(message, HasSubstr("user \"ghost\""));
  EXPECT_THAT(message, HasSubstr("context \"other\""));
  EXPECT_THAT(message, HasSubstr("\"dev-user\""));
}

TEST_F(KubeconfigTest, ClusterWithoutServerIsAClearError) {
  EXPECT_THAT(
      resolve_error("current-context: x\n"
                    "clusters: [{name: c, cluster: {insecure-skip-tls-verify: true}}]\n"
                    "contexts: [{name: x, context: {cluster: c}}]\n"),
      HasSubstr("cluster \"c\" (" + (dir_.path() / "config").string() + ":2) has no server"));
}

TEST_F(KubeconfigTest, ServerGetsHttpsSchemeAndLosesTrailingSlash) {
  EXPECT_EQ(resolve("current-context: x\n"
                    "clusters: [{name: c, cluster: {server: 'k8s.local:6443/'}}]\n"
                    "contexts: [{name: x, context: {cluster: c}}]\n")
                .server,
            "https://k8s.local:6443");
  EXPECT_THAT(resolve_error("current-context: x\n"
                            "clusters: [{name: c, cluster: {server: 'ftp://k8s'}}]\n"
                            "contexts: [{name: x, context: {cluster: c}}]\n"),
              HasSubstr("https://"));
}

TEST_F(KubeconfigTest, ServerFlagOverridesAndClearsTlsServerName) {
  const std::string yaml = simple_config("    token: t\n", "    tls-server-name: dev.internal\n");
  EXPECT_EQ(resolve(yaml).tls.server_name, "dev.internal");
  ConfigOverrides o;
  o.server = "https://other:443";
  const RestConfig r = resolve(yaml, o);
  EXPECT_EQ(r.server, "https://other:443");
  EXPECT_EQ(r.tls.server_name, "");
  o.tls_server_name = "flag.internal";
  EXPECT_EQ(resolve(yaml, o).tls.server_name, "flag.internal");
}

TEST_F(KubeconfigTest, CertificateAuthorityFlagReplacesKubeconfigTrust) {
  dir_.write("flag-ca.pem", "FLAG-CA");
  const std::string yaml = simple_config(
      "    token: t\n", "    certificate-authority-data: " + base64_encode("FILE-CA") + "\n");
  ConfigOverrides o;
  o.certificate_authority = (dir_.path() / "flag-ca.pem").string();
  EXPECT_EQ(resolve(yaml, o).tls.ca_pem, "FLAG-CA");
}

TEST_F(KubeconfigTest, InsecureFlagClearsTheKubeconfigsCertificateAuthority) {
  const std::string yaml = simple_config(
      "    token: t\n", "    certificate-authority-data: " + base64_encode("FILE-CA") + "\n");
  ConfigOverrides o;
  o.insecure_skip_tls_verify = true;
  const RestConfig r = resolve(yaml, o);
  EXPECT_TRUE(r.tls.insecure_skip_verify);
  EXPECT_EQ(r.tls.ca_pem, "");
}

TEST_F(KubeconfigTest, InsecureTogetherWithACertificateAuthorityIsAnError) {
  EXPECT_THAT(resolve_error(simple_config("    token: t\n",
                                          "    insecure-skip-tls-verify: true\n"
                                          "    certificate-authority-data: " +
                                              base64_encode("CA") + "\n")),
              HasSubstr("insecure-skip-tls-verify cannot be combined"));
}

TEST_F(KubeconfigTest, TokenFlagReplacesOtherUserAuth) {
  ConfigOverrides o;
  o.token = "flag-token";
  const RestConfig r = resolve(simple_config("    exec:\n"
                                             "      apiVersion: client.authentication.k8s.io/v1\n"
                                             "      command: plugin\n"
                                             "      interactiveMode: Never\n"
                                             "    username: u\n"
                                             "    password: p\n"),
                               o);
  EXPECT_EQ(r.auth.token, "flag-token");
  EXPECT_FALSE(r.auth.exec.has_value());
  EXPECT_EQ(r.auth.username, "");
  EXPECT_EQ(r.auth.password, "");
}

TEST_F(KubeconfigTest, ClientCertificateFlagsOverrideTheUser) {
  dir_.write("flag.crt", "FLAG-CERT");
  dir_.write("flag.key", "FLAG-KEY");
  ConfigOverrides o;
  o.client_certificate = (dir_.path() / "flag.crt").string();
  o.client_key = (dir_.path() / "flag.key").string();
  const RestConfig r =
      resolve(simple_config("    client-certificate-data: " + base64_encode("FILE-CERT") +
                            "\n    client-key-data: " + base64_encode("FILE-KEY") + "\n"),
              o);
  EXPECT_EQ(r.auth.client_cert_pem, "FLAG-CERT");
  EXPECT_EQ(r.auth.client_key_pem, "FLAG-KEY");
}

TEST_F(KubeconfigTest, UnreadableFlagFileNamesTheFlag) {
  ConfigOverrides o;
  o.certificate_authority = (dir_.path() / "missing-ca.pem").string();
  const std::string message = resolve_error(simple_config(), o);
  EXPECT_THAT(message, HasSubstr("missing-ca.pem"));
  EXPECT_THAT(message, HasSubstr("--certificate-authority"));
}

// ---- cluster fields ----------------------------------------------------------------------------

TEST_F(KubeconfigTest, CertificateAuthorityDataWinsAndIsDecoded) {
  const RestConfig r =
      resolve(simple_config("    token: t\n",
                            "    certificate-authority: /does/not/exist.pem\n"
                            "    certificate-authority-data: " +
                                base64_encode("-----BEGIN CERTIFICATE-----\n") + "\n"));
  EXPECT_EQ(r.tls.ca_pem, "-----BEGIN CERTIFICATE-----\n");
}

TEST_F(KubeconfigTest, BadBase64NamesFieldFileAndLine) {
  const std::string message =
      resolve_error(simple_config("    token: t\n", "    certificate-authority-data: '%%%'\n"));
  EXPECT_THAT(message, HasSubstr((dir_.path() / "config").string() +
                                 ":8: clusters[0].cluster.certificate-authority-data: invalid "
                                 "base64"));
}

TEST_F(KubeconfigTest, UnreadableCertificateAuthorityNamesFileAndField) {
  const std::string message =
      resolve_error(simple_config("    token: t\n", "    certificate-authority: missing-ca.pem\n"));
  EXPECT_THAT(message,
              HasSubstr("certificate-authority " + (dir_.path() / "missing-ca.pem").string()));
  EXPECT_THAT(message, HasSubstr("cluster \"dev-cluster\""));
}

TEST_F(KubeconfigTest, ProxyUrlAcceptsHttpHttpsSocks5Only) {
  EXPECT_EQ(resolve(simple_config("    token: t\n", "    proxy-url: socks5://127.0.0.1:1080\n"))
                .proxy_url,
            "socks5://127.0.0.1:1080");
  EXPECT_EQ(
      resolve(simple_config("    token: t\n", "    proxy-url: http://proxy:3128\n")).proxy_url,
      "http://proxy:3128");
  EXPECT_THAT(resolve_error(simple_config("    token: t\n", "    proxy-url: ftp://proxy\n")),
              HasSubstr("unsupported scheme \"ftp\""));
}

// ---- user fields -------------------------------------------------------------------------------

TEST_F(KubeconfigTest, ClientCertificateDataWinsOverFiles) {
  const RestConfig r =
      resolve(simple_config("    client-certificate: /nope.crt\n"
                            "    client-certificate-data: " +
                            base64_encode("CERT") +
                            "\n"
                            "    client-key: /nope.key\n"
                            "    client-key-data: " +
                            base64_encode("KEY") + "\n"));
  EXPECT_EQ(r.auth.client_cert_pem, "CERT");
  EXPECT_EQ(r.auth.client_key_pem, "KEY");
}

TEST_F(KubeconfigTest, ClientCertificateFilesAreRead) {
  dir_.write("c.crt", "CERT-FROM-FILE");
  dir_.write("c.key", "KEY-FROM-FILE");
  const RestConfig r =
      resolve(simple_config("    client-certificate: c.crt\n    client-key: c.key\n"));
  EXPECT_EQ(r.auth.client_cert_pem, "CERT-FROM-FILE");
  EXPECT_EQ(r.auth.client_key_pem, "KEY-FROM-FILE");
}

TEST_F(KubeconfigTest, UnreadableClientKeyNamesFileAndUser) {
  dir_.write("c.crt", "CERT");
  const std::string message =
      resolve_error(simple_config("    client-certificate: c.crt\n    client-key: gone.key\n"));
  EXPECT_THAT(message, HasSubstr("client-key " + (dir_.path() / "gone.key").string()));
  EXPECT_THAT(message, HasSubstr("user \"dev-user\""));
}

TEST_F(KubeconfigTest, ClientCertificateNeedsAKeyAndViceVersa) {
  EXPECT_THAT(
      resolve_error(simple_config("    client-certificate-data: " + base64_encode("C") + "\n")),
      HasSubstr("client-certificate is set without client-key"));
  EXPECT_THAT(resolve_error(simple_config("    client-key-data: " + base64_encode("K") + "\n")),
              HasSubstr("client-key is set without client-certificate"));
}

TEST_F(KubeconfigTest, ClientCertificateMayBeCombinedWithAToken) {
  const RestConfig r =
      resolve(simple_config("    token: t\n    client-certificate-data: " + base64_encode("C") +
                            "\n    client-key-data: " + base64_encode("K") + "\n"));
  EXPECT_EQ(r.auth.token, "t");
  EXPECT_EQ(r.auth.client_cert_pem, "C");
}

TEST_F(KubeconfigTest, TokenWinsOverTokenFile) {
  dir_.write("token-file", "from-file");
  const RestConfig with_both =
      resolve(simple_config("    token: inline\n    tokenFile: token-file\n"));
  EXPECT_EQ(with_both.auth.token, "inline");
  EXPECT_EQ(with_both.auth.token_file, "");
  const RestConfig file_only = resolve(simple_config("    tokenFile: token-file\n"));
  EXPECT_EQ(file_only.auth.token, "");
  EXPECT_EQ(file_only.auth.token_file, (dir_.path() / "token-file").string());
}

TEST_F(KubeconfigTest, UnreadableTokenFileIsAnError) {
  EXPECT_THAT(resolve_error(simple_config("    tokenFile: nope\n")),
              HasSubstr("tokenFile " + (dir_.path() / "nope").string()));
}

TEST_F(KubeconfigTest, BasicAuthAndImpersonation) {
  const RestConfig r =
      resolve(simple_config("    username: alice\n"
                            "    password: s3cret\n"
                            "    as: bob\n"
                            "    as-groups: [admins, devs]\n"));
  EXPECT_EQ(r.auth.username, "alice");
  EXPECT_EQ(r.auth.password, "s3cret");
  EXPECT_EQ(r.auth.impersonate_user, "bob");
  EXPECT_THAT(r.auth.impersonate_groups, ElementsAre("admins", "devs"));
}

TEST_F(KubeconfigTest, ImpersonatedGroupsNeedAUser) {
  EXPECT_THAT(resolve_error(simple_config("    token: t\n    as-groups: [admins]\n")),
              HasSubstr("as-groups"));
}

TEST_F(KubeconfigTest, MoreThanOneAuthMethodIsAnError) {
  const std::string exec =
      "    exec:\n"
      "      apiVersion: client.authentication.k8s.io/v1\n"
      "      command: plugin\n"
      "      interactiveMode: Never\n";
  EXPECT_THAT(resolve_error(simple_config("    token: t\n    username: u\n    password: p\n")),
              HasSubstr("more than one authentication method found (token, basicAuth)"));
  EXPECT_THAT(resolve_error(simple_config("    tokenFile: /x\n" + exec)),
              HasSubstr("more than one authentication method found (token, exec)"));
  EXPECT_THAT(resolve_error(simple_config(exec + "    auth-provider: {name: oidc}\n")),
              HasSubstr("more than one authentication method found (exec, auth-provider)"));
}

TEST_F(KubeconfigTest, ExecPluginIsReadAndValidated) {
  const RestConfig r =
      resolve(simple_config("    exec:\n"
                            "      apiVersion: client.authentication.k8s.io/v1\n"
                            "      command: /usr/bin/plugin\n"
                            "      args: [get-token, --cluster, dev]\n"
                            "      env:\n"
                            "      - name: MODE\n"
                            "        value: fast\n"
                            "      interactiveMode: Never\n"
                            "      provideClusterInfo: true\n"
                            "      installHint: install the plugin\n"));
  ASSERT_TRUE(r.auth.exec.has_value());
  const ExecPluginConfig& e = *r.auth.exec;
  EXPECT_EQ(e.api_version, "client.authentication.k8s.io/v1");
  EXPECT_EQ(e.command, "/usr/bin/plugin");
  EXPECT_THAT(e.args, ElementsAre("get-token", "--cluster", "dev"));
  ASSERT_EQ(e.env.size(), 1u);
  EXPECT_EQ(e.env[0], std::make_pair(std::string("MODE"), std::string("fast")));
  EXPECT_EQ(e.interactive_mode, "Never");
  EXPECT_TRUE(e.provide_cluster_info);
  EXPECT_EQ(e.install_hint, "install the plugin");
}

TEST_F(KubeconfigTest, ExecV1RequiresInteractiveModeV1beta1DefaultsIt) {
  EXPECT_THAT(resolve_error(simple_config("    exec:\n"
                                          "      apiVersion: client.authentication.k8s.io/v1\n"
                                          "      command: plugin\n")),
              HasSubstr("interactiveMode is required"));
  const RestConfig r =
      resolve(simple_config("    exec:\n"
                            "      apiVersion: "
                            "client.authentication.k8s.io/v1beta1\n"
                            "      command: plugin\n"));
  EXPECT_EQ(r.auth.exec->interactive_mode, "IfAvailable");
}

TEST_F(KubeconfigTest, ExecWithUnknownApiVersionOrModeIsAnError) {
  EXPECT_THAT(
      resolve_error(simple_config("    exec:\n"
                                  "      apiVersion: client.authentication.k8s.io/v1alpha1\n"
                                  "      command: plugin\n")),
      HasSubstr("v1alpha1 is no longer supported"));
  EXPECT_THAT(resolve_error(simple_config("    exec:\n"
                                          "      apiVersion: example.com/v9\n"
                                          "      command: plugin\n")),
              HasSubstr("\"example.com/v9\" is not supported"));
  EXPECT_THAT(resolve_error(simple_config("    exec:\n"
                                          "      apiVersion: client.authentication.k8s.io/v1\n"
                                          "      command: plugin\n"
                                          "      interactiveMode: Sometimes\n")),
              HasSubstr("\"Sometimes\""));
}

TEST_F(KubeconfigTest, RemovedAuthProvidersPointToTheirExecPlugins) {
  const std::string gcp = resolve_error(simple_config("    auth-provider:\n      name: gcp\n"));
  EXPECT_THAT(gcp, HasSubstr("removed in kubectl 1.26"));
  EXPECT_THAT(gcp, HasSubstr("gke-gcloud-auth-plugin"));
  const std::string azure = resolve_error(simple_config("    auth-provider:\n      name: azure\n"));
  EXPECT_THAT(azure, HasSubstr("removed in kubectl 1.26"));
  EXPECT_THAT(azure, HasSubstr("kubelogin"));
  EXPECT_THAT(resolve_error(simple_config("    auth-provider:\n      name: oidc\n")),
              HasSubstr("kubelogin"));
}

// ---- YAML errors -------------------------------------------------------------------------------

TEST_F(KubeconfigTest, WrongTypeNamesFileLineAndFieldPath) {
  const std::string message = resolve_error(simple_config("    token:\n      nested: map\n"));
  EXPECT_EQ(message,
            (dir_.path() / "config").string() + ":11: users[0].user.token: expected a string");
}

TEST_F(KubeconfigTest, WrongTypeForListOrBoolIsNamed) {
  EXPECT_THAT(resolve_error("clusters: {a: b}\n"), HasSubstr(":1: clusters: expected a list"));
  EXPECT_THAT(
      resolve_error(simple_config("    token: t\n", "    insecure-skip-tls-verify: maybe\n")),
      HasSubstr(":8: clusters[0].cluster.insecure-skip-tls-verify: expected true or false"));
}

TEST_F(KubeconfigTest, SyntaxErrorNamesFileAndLine) {
  const std::string message = resolve_error("clusters:\n- name: a\n  cluster: [unclosed\n");
  EXPECT_THAT(message, HasSubstr((dir_.path() / "config").string() + ":"));
  EXPECT_THAT(message, HasSubstr("invalid YAML"));
}

// ---- in-cluster and no configuration -----------------------------------------------------------

TEST_F(KubeconfigTest, InClusterConfigWhenNoKubeconfigExists) {
  make_in_cluster();
  const RestConfig r = resolve_rest_config({}, env_);
  EXPECT_TRUE(r.in_cluster);
  EXPECT_EQ(r.source, "in-cluster");
  EXPECT_EQ(r.server, "https://10.96.0.1:443");
  EXPECT_EQ(r.auth.token_file, (dir_.path() / "sa/token").string());
  EXPECT_EQ(r.auth.token, "");
  EXPECT_EQ(r.tls.ca_pem, "IN-CLUSTER-CA");
  EXPECT_EQ(r.default_namespace, "team-a");
}

TEST_F(KubeconfigTest, InClusterIpv6HostIsBracketed) {
  make_in_cluster("fd00::1", "443");
  EXPECT_EQ(resolve_rest_config({}, env_).server, "https://[fd00::1]:443");
}

TEST_F(KubeconfigTest, InClusterNamespaceFromPodNamespaceThenFileThenDefault) {
  make_in_cluster();
  env_.env["POD_NAMESPACE"] = "from-env";
  EXPECT_EQ(resolve_rest_config({}, env_).default_namespace, "from-env");
  env_.env.erase("POD_NAMESPACE");
  EXPECT_EQ(resolve_rest_config({}, env_).default_namespace, "team-a");
  fs::remove(dir_.path() / "sa/namespace");
  EXPECT_EQ(resolve_rest_config({}, env_).default_namespace, "default");
}

TEST_F(KubeconfigTest, FlagsOverrideInClusterConfig) {
  make_in_cluster();
  env_.env["POD_NAMESPACE"] = "from-env";
  ConfigOverrides o;
  o.namespace_ = "from-flag";
  o.token = "flag-token";
  o.request_timeout = "45s";
  const RestConfig r = resolve_rest_config(o, env_);
  EXPECT_EQ(r.default_namespace, "from-flag");
  EXPECT_EQ(r.auth.token, "flag-token");
  EXPECT_EQ(r.auth.token_file, "");
  EXPECT_EQ(r.timeout, std::chrono::seconds(45));
}

TEST_F(KubeconfigTest, KubeconfigWinsOverInCluster) {
  make_in_cluster();
  dir_.write("home/.kube/config", simple_config());
  const RestConfig r = resolve_rest_config({}, env_);
  EXPECT_FALSE(r.in_cluster);
  EXPECT_EQ(r.server, "https://dev.example.com:6443");
}

TEST_F(KubeconfigTest, EmptyKubeconfigFileFallsBackToInCluster) {
  make_in_cluster();
  dir_.write("home/.kube/config", "");
  EXPECT_TRUE(resolve_rest_config({}, env_).in_cluster);
}

TEST_F(KubeconfigTest, InClusterNeedsTheTokenFile) {
  make_in_cluster();
  fs::remove(dir_.path() / "sa/token");
  EXPECT_THAT(testing::config_error([&] { resolve_rest_config({}, env_); }),
              HasSubstr("no configuration"));
}

TEST_F(KubeconfigTest, NoConfigurationAnywhereIsAnError) {
  EXPECT_EQ(testing::config_error([&] { resolve_rest_config({}, env_); }),
            "no configuration: set --kubeconfig, $KUBECONFIG or ~/.kube/config, or run inside a "
            "cluster (try `trainctl sandbox up`)");
}

TEST_F(KubeconfigTest, ServerFlagAloneIsEnoughWithoutKubeconfig) {
  ConfigOverrides o;
  o.server = "https://127.0.0.1:6443";
  o.insecure_skip_tls_verify = true;
  const RestConfig r = resolve_rest_config(o, env_);
  EXPECT_EQ(r.server, "https://127.0.0.1:6443");
  EXPECT_TRUE(r.tls.insecure_skip_verify);
  EXPECT_EQ(r.default_namespace, "default");
}

TEST_F(KubeconfigTest, NoCurrentContextIsAnErrorSuggestingUseContext) {
  const std::string message = resolve_error(
      "clusters: [{name: c, cluster: {server: https://x}}]\n"
      "contexts: [{name: only, context: {cluster: c}}]\n");
  EXPECT_THAT(message, HasSubstr("no current context"));
  EXPECT_THAT(message, HasSubstr("use-context"));
  EXPECT_THAT(message, HasSubstr("\"only\""));
}

// ---- client settings ---------------------------------------------------------------------------

TEST(RequestTimeoutTest, ParsesSecondsAndGoDurations) {
  using std::chrono::milliseconds;
  EXPECT_EQ(parse_request_timeout(""), milliseconds(0));
  EXPECT_EQ(parse_request_timeout("0"), milliseconds(0));
  EXPECT_EQ(parse_request_timeout("30"), milliseconds(30000));
  EXPECT_EQ(parse_request_timeout("30s"), milliseconds(30000));
  EXPECT_EQ(parse_request_timeout("1m"), milliseconds(60000));
  EXPECT_EQ(parse_request_timeout("500ms"), milliseconds(500));
  EXPECT_EQ(parse_request_timeout("1h30m"), milliseconds(5400000));
  EXPECT_EQ(parse_request_timeout("1.5s"), milliseconds(1500));
}

TEST(RequestTimeoutTest, RejectsGarbage) {
  for (const char* bad : {"abc", "-1s", "10x", "1.2.3s", "s", "30 s"}) {
    EXPECT_THAT(testing::config_error([&] { parse_request_timeout(bad); }),
                HasSubstr("--request-timeout"))
        << bad;
  }
}

TEST_F(KubeconfigTest, ClientSettingsComeFromFlags) {
  ConfigOverrides o;
  o.request_timeout = "1m";
  o.qps = 5;
  o.burst = 10;
  const RestConfig r = resolve(simple_config(), o);
  EXPECT_EQ(r.timeout, std::chrono::minutes(1));
  EXPECT_EQ(r.qps, 5);
  EXPECT_EQ(r.burst, 10);
  o.request_timeout = "soon";
  EXPECT_THAT(resolve_error(simple_config(), o), HasSubstr("\"soon\""));
  o.request_timeout = "";
  o.burst = -1;
  EXPECT_THAT(resolve_error(simple_config(), o), HasSubstr("--kube-api-burst"));
}

// ---- config view -------------------------------------------------------------------------------

const char* kSecretsConfig =
    "current-context: dev\n"
    "clusters:\n"
    "- name: dev-cluster\n"
    "  cluster:\n"
    "    server: https://dev:6443\n"
    "    certificate-authority-data: Q0EtREFUQQ==\n"
    "- name: other-cluster\n"
    "  cluster:\n"
    "    server: https://other:6443\n"
    "users:\n"
    "- name: dev-user\n"
    "  user:\n"
    "    token: super-secret-token\n"
    "    client-certificate-data: Q0VSVA==\n"
    "    client-key-data: S0VZ\n"
    "- name: basic\n"
    "  user:\n"
    "    username: alice\n"
    "    password: hunter2\n"
    "- name: plugin\n"
    "  user:\n"
    "    exec:\n"
    "      apiVersion: client.authentication.k8s.io/v1\n"
    "      command: plugin\n"
    "      interactiveMode: Never\n"
    "      env:\n"
    "      - {name: AWS_SECRET_ACCESS_KEY, value: aws-secret}\n"
    "      - {name: API_TOKEN, value: tok-secret}\n"
    "      - {name: AWS_PROFILE, value: research}\n"
    "contexts:\n"
    "- name: dev\n"
    "  context: {cluster: dev-cluster, user: dev-user, namespace: ml}\n"
    "- name: other\n"
    "  context: {cluster: other-cluster, user: basic}\n";

TEST_F(KubeconfigTest, ViewRedactsSecrets) {
  dir_.write("config", kSecretsConfig);
  use_kubeconfigs({"config"});
  const std::string view = render_kubeconfig(load_kubeconfig({}, env_));
  for (const char* secret : {"super-secret-token", "hunter2", "aws-secret", "tok-secret",
                             "Q0EtREFUQQ==", "Q0VSVA==", "S0VZ"}) {
    EXPECT_THAT(view, Not(HasSubstr(secret)));
  }
  const YAML::Node doc = YAML::Load(view);
  EXPECT_EQ(doc["current-context"].as<std::string>(), "dev");
  EXPECT_EQ(doc["kind"].as<std::string>(), "Config");
  EXPECT_EQ(doc["clusters"][0]["name"].as<std::string>(), "dev-cluster");
  EXPECT_EQ(doc["clusters"][0]["cluster"]["certificate-authority-data"].as<std::string>(),
            "DATA+OMITTED");
  // Users are sorted by name: basic, dev-user, plugin.
  EXPECT_EQ(doc["users"][0]["user"]["password"].as<std::string>(), "REDACTED");
  EXPECT_EQ(doc["users"][0]["user"]["username"].as<std::string>(), "alice");
  EXPECT_EQ(doc["users"][1]["user"]["token"].as<std::string>(), "REDACTED");
  EXPECT_EQ(doc["users"][1]["user"]["client-key-data"].as<std::string>(), "DATA+OMITTED");
  EXPECT_EQ(doc["users"][1]["user"]["client-certificate-data"].as<std::string>(), "DATA+OMITTED");
  const YAML::Node env = doc["users"][2]["user"]["exec"]["env"];
  EXPECT_EQ(env[0]["value"].as<std::string>(), "REDACTED");
  EXPECT_EQ(env[1]["value"].as<std::string>(), "REDACTED");
  EXPECT_EQ(env[2]["value"].as<std::string>(), "research");
  EXPECT_EQ(doc["contexts"][0]["context"]["namespace"].as<std::string>(), "ml");
}

TEST_F(KubeconfigTest, RawViewShowsSecretsAndReloadsToTheSameConfig) {
  dir_.write("config", kSecretsConfig);
  use_kubeconfigs({"config"});
  const std::string view =
      render_kubeconfig(load_kubeconfig({}, env_), view_options(false, "", true));
  EXPECT_THAT(view, HasSubstr("super-secret-token"));
  EXPECT_THAT(view, HasSubstr("Q0EtREFUQQ=="));
  dir_.write("again", view);
  const Kubeconfig again = load_kubeconfigs({dir_.path() / "again"});
  EXPECT_EQ(again.clusters.at("dev-cluster").value.certificate_authority_data, "CA-DATA");
  EXPECT_EQ(again.users.at("dev-user").value.client_key_data, "KEY");
  EXPECT_EQ(again.users.at("plugin").value.exec->env.size(), 3u);
  EXPECT_EQ(again.current_context, "dev");
}

TEST_F(KubeconfigTest, MinifiedViewKeepsOnlyTheSelectedContext) {
  dir_.write("config", kSecretsConfig);
  use_kubeconfigs({"config"});
  const Kubeconfig config = load_kubeconfig({}, env_);
  const YAML::Node doc = YAML::Load(render_kubeconfig(config, view_options(true)));
  ASSERT_EQ(doc["contexts"].size(), 1u);
  EXPECT_EQ(doc["clusters"].size(), 1u);
  EXPECT_EQ(doc["users"].size(), 1u);
  EXPECT_EQ(doc["users"][0]["name"].as<std::string>(), "dev-user");
  const YAML::Node other = YAML::Load(render_kubeconfig(config, view_options(true, "other")));
  EXPECT_EQ(other["current-context"].as<std::string>(), "other");
  EXPECT_EQ(other["users"][0]["name"].as<std::string>(), "basic");
}

TEST_F(KubeconfigTest, ViewQuotesNamesThatLookLikeOtherTypes) {
  dir_.write("config",
             "clusters: [{name: 'true', cluster: {server: https://x}}, "
             "{name: '123', cluster: {server: https://y}}]\n");
  const std::string view = render_kubeconfig(load_kubeconfigs({dir_.path() / "config"}));
  // Unquoted, Go's YAML reader (kubectl) would see a bool and a number.
  EXPECT_THAT(view, HasSubstr("name: \"true\""));
  EXPECT_THAT(view, HasSubstr("name: \"123\""));
  const YAML::Node doc = YAML::Load(view);
  EXPECT_EQ(doc["clusters"][0]["name"].Tag(), "!");
}

// ---- use-context -------------------------------------------------------------------------------

TEST_F(KubeconfigTest, SetCurrentContextKeepsTheRestOfTheDocument) {
  const std::string original =
      "# my clusters\n"
      "apiVersion: v1\n"
      "current-context: old   # the one I use\n"
      "clusters:\n"
      "- name: c   # comment kept\n"
      "  cluster: {server: https://x}\n";
  const fs::path file = dir_.write("config", original);
  set_current_context(file, "new-ctx");
  const std::string text = testing::TempDir::read(file);
  EXPECT_THAT(text, HasSubstr("# my clusters\n"));
  EXPECT_THAT(text, HasSubstr("- name: c   # comment kept\n"));
  EXPECT_THAT(text, HasSubstr("current-context: new-ctx\n"));
  EXPECT_THAT(text, Not(HasSubstr("old")));
  EXPECT_EQ(load_kubeconfigs({file}).current_context, "new-ctx");
}

TEST_F(KubeconfigTest, SetCurrentContextAppendsWhenMissingAndKeepsPermissions) {
  const fs::path file = dir_.write("config", "clusters: []\n");
  ::chmod(file.c_str(), 0600);
  set_current_context(file, "yes");  // a name that must be quoted to stay a string
  EXPECT_EQ(load_kubeconfigs({file}).current_context, "yes");
  EXPECT_THAT(testing::TempDir::read(file), HasSubstr("current-context: \"yes\"\n"));
  EXPECT_THAT(testing::TempDir::read(file), HasSubstr("clusters: []\n"));
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(KubeconfigTest, SetCurrentContextFillsAnEmptyValueInPlace) {
  const fs::path file = dir_.write("config", "# keep me\ncurrent-context:\nclusters: []\n");
  set_current_context(file, "filled");
  EXPECT_EQ(testing::TempDir::read(file), "# keep me\ncurrent-context: filled\nclusters: []\n");
}

TEST_F(KubeconfigTest, SetCurrentContextRewritesJsonKubeconfigs) {
  const fs::path file = dir_.write("config", R"({"current-context": "old", "clusters": []})");
  set_current_context(file, "new");
  EXPECT_EQ(load_kubeconfigs({file}).current_context, "new");
}

TEST_F(KubeconfigTest, UseContextWritesTheFileThatSetsCurrentContext) {
  dir_.write("first", "contexts: [{name: a, context: {cluster: c}}]\n");
  dir_.write("second", "current-context: a\ncontexts: [{name: b, context: {cluster: c}}]\n");
  use_kubeconfigs({"first", "second"});
  EXPECT_EQ(use_context(load_kubeconfig({}, env_), "b"), dir_.path() / "second");
  EXPECT_EQ(load_kubeconfigs({dir_.path() / "second"}).current_context, "b");
  EXPECT_EQ(load_kubeconfigs({dir_.path() / "first"}).current_context, "");
}

TEST_F(KubeconfigTest, UseContextWritesTheFirstFileWhenNoneSetsCurrentContext) {
  dir_.write("first", "contexts: [{name: a, context: {cluster: c}}]\n");
  dir_.write("second", "contexts: [{name: b, context: {cluster: c}}]\n");
  use_kubeconfigs({"missing", "first", "second"});
  EXPECT_EQ(use_context(load_kubeconfig({}, env_), "b"), dir_.path() / "first");
  EXPECT_EQ(load_kubeconfigs({dir_.path() / "first"}).current_context, "b");
}

TEST_F(KubeconfigTest, UseContextRejectsUnknownContexts) {
  dir_.write("first", "current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n");
  use_kubeconfigs({"first"});
  EXPECT_THAT(testing::config_error([&] { use_context(load_kubeconfig({}, env_), "zzz"); }),
              HasSubstr("\"zzz\""));
  EXPECT_EQ(load_kubeconfigs({dir_.path() / "first"}).current_context, "a");
}

TEST(TlsSessionCacheDirTest, IsInKubectlsCacheDirectoryAsItsFlagAndEnvironmentName) {
  ConfigEnvironment env;
  env.env["HOME"] = "/home/a";
  ConfigOverrides flags;
  EXPECT_EQ(tls_session_cache_dir(flags, env), "/home/a/.kube/cache/trainctl/tls-sessions");
  env.env["KUBECACHEDIR"] = "/var/cache/kube";
  EXPECT_EQ(tls_session_cache_dir(flags, env), "/var/cache/kube/trainctl/tls-sessions");
  flags.cache_dir = "/tmp/c";
  EXPECT_EQ(tls_session_cache_dir(flags, env), "/tmp/c/trainctl/tls-sessions");
  flags.cache_dir = "";
  EXPECT_EQ(tls_session_cache_dir(flags, env), "");
  EXPECT_EQ(tls_session_cache_dir({}, ConfigEnvironment{}), "");  // no home: nothing kept
}

}  // namespace
}  // namespace trainctl::kube
