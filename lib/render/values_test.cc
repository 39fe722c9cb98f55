#include "render/values.h"

#include <gtest/gtest.h>

#include <fstream>

#include "error.h"

namespace trainctl::render {
namespace {

namespace fs = std::filesystem;

class ValuesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trainctl_values_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p;
  }
  fs::path dir_;
};

nlohmann::json set(std::initializer_list<const char*> assignments) {
  nlohmann::json v = nlohmann::json::object();
  for (const char* a : assignments)
    set_value(v, a);
  return v;
}

TEST(SetValue, TypesScalarsByYamlCoreSchema) {
  auto v = set({"workers=4", "image=foo:1", "hostNetwork=true", "ratio=0.5", "queue=", "tag=\"4\"",
                "name=job-1"});
  EXPECT_EQ(v["workers"], 4);
  EXPECT_EQ(v["image"], "foo:1");
  EXPECT_EQ(v["hostNetwork"], true);
  EXPECT_EQ(v["ratio"], 0.5);
  EXPECT_TRUE(v["queue"].is_null());
  EXPECT_EQ(v["name"], "job-1");
}

TEST(SetValue, SetStringForcesString) {
  nlohmann::json v = nlohmann::json::object();
  set_value(v, "workers=4", true);
  set_value(v, "flag=true", true);
  EXPECT_EQ(v["workers"], "4");
  EXPECT_EQ(v["flag"], "true");
}

TEST(SetValue, DottedPathsCreateObjectsAndKeepSiblings) {
  auto v = set({"worker.image=a", "worker.cpu=2", "labels.team=ml"});
  EXPECT_EQ(v, nlohmann::json::parse(R"({"worker":{"image":"a","cpu":2},"labels":{"team":"ml"}})"));
}

TEST(SetValue, ArrayIndexesPadWithNull) {
  auto v = set({"command[1]=train.py", "command[0]=python", "env[2].name=A", "m[1][0]=x"});
  EXPECT_EQ(v["command"], nlohmann::json::parse(R"(["python","train.py"])"));
  EXPECT_EQ(v["env"], nlohmann::json::parse(R"([null,null,{"name":"A"}])"));
  EXPECT_EQ(v["m"], nlohmann::json::parse(R"([null,["x"]])"));
}

TEST(SetValue, EscapedDotsAndEqualsStayInKey) {
  auto v = set({R"(annotations.sidecar\.istio\.io/inject=false)", R"(labels.a\=b=c=d)"});
  EXPECT_EQ(v["annotations"]["sidecar.istio.io/inject"], false);
  EXPECT_EQ(v["labels"]["a=b"], "c=d");  // the first unescaped '=' splits
}

TEST(SetValue, IndexesStopAtHelmsLargest) {
  EXPECT_EQ(set({"l[65536]=x"})["l"].size(), 65537u);
  nlohmann::json v = nlohmann::json::object();
  try {
    set_value(v, "l[65537]=x");
    ADD_FAILURE() << "accepted index 65537";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_EQ(e.message(),
              "--set l[65537]=x: index 65537 is greater than the largest allowed, 65536");
  }
  EXPECT_TRUE(v.empty()) << "nothing set";
}

TEST(SetValue, LaterAssignmentsReplace) {
  auto v = set({"worker=3", "worker.image=x"});
  EXPECT_EQ(v["worker"], nlohmann::json::parse(R"({"image":"x"})"));
}

TEST(SetValue, MalformedIsUsageErrorNamingAssignment) {
  for (const char* bad :
       {"noequals", "=x", "a..b=1", "a.=1", "a[x]=1", "a[1=1", "a[]=1", "a[0]b=1", "a\\"}) {
    nlohmann::json v = nlohmann::json::object();
    try {
      set_value(v, bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Usage) << bad;
      EXPECT_NE(e.message().find(bad), std::string::npos) << e.message();
    }
  }
}

TEST(DeepMerge, ObjectsMergeEverythingElseReplaced) {
  auto base = nlohmann::json::parse(R"({"a":{"b":1,"c":{"d":2}},"l":[1,2],"s":"x","o":{"k":1}})");
  deep_merge(base, nlohmann::json::parse(R"({"a":{"c":{"e":3}},"l":[9],"o":"now-string"})"));
  EXPECT_EQ(base, nlohmann::json::parse(
                      R"({"a":{"b":1,"c":{"d":2,"e":3}},"l":[9],"s":"x","o":"now-string"})"));
}

TEST(EnvValues, MapsNamesToCamelCasePaths) {
  auto v = env_values({{"TRAINCTL_IMAGE", "img:1"},
                       {"TRAINCTL_PRIORITY_CLASS", "high"},
                       {"TRAINCTL_WORKER__CPU", "4"},
                       {"TRAINCTL_NODE_SELECTOR__POOL", "gpu"},
                       {"TRAINCTL_TEMPLATE_PATH", "/t"},
                       {"TRAINCTL_TEST_X", "1"},
                       {"TRAINCTL_BAD____X", "1"},
                       {"HOME", "/root"}});
  EXPECT_EQ(v, nlohmann::json::parse(
                   R"({"image":"img:1","priorityClass":"high","worker":{"cpu":4},
                       "nodeSelector":{"pool":"gpu"}})"));
}

TEST_F(ValuesTest, LoadValuesFileReadsYaml) {
  auto p = write("v.yaml", "workers: 2\nimage: \"x:1\"\nenv:\n- {name: A, value: 'b: c'}\n");
  auto v = load_values_file(p);
  EXPECT_EQ(v["workers"], 2);
  EXPECT_EQ(v["env"][0]["value"], "b: c");
  EXPECT_EQ(load_values_file(write("empty.yaml", "")), nlohmann::json::object());
}

TEST_F(ValuesTest, BadValuesFileNamesFileLineAndColumn) {
  auto p = write("bad.yaml", "workers: 2\nimage: [unclosed\n");
  try {
    load_values_file(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Validation);
    EXPECT_NE(e.message().find(p.string() + ":3:1"), std::string::npos) << e.message();
  }
  auto list = write("list.yaml", "- a\n");
  EXPECT_THROW(load_values_file(list), Error);
  EXPECT_THROW(load_values_file(dir_ / "missing.yaml"), Error);
}

TEST_F(ValuesTest, DiscoverFindsRepoConfigUpToGitRoot) {
  write("repo/.git/HEAD", "x");
  write("repo/.trainctl.yaml", "image: repo\n");
  write(".trainctl.yaml", "image: above-git-root\n");
  fs::create_directories(dir_ / "repo/a/b");
  auto s = discover_value_sources(dir_ / "repo/a/b", {{"HOME", "/h"}, {"TRAINCTL_IMAGE", "e"}});
  EXPECT_EQ(s.repo_config, dir_ / "repo/.trainctl.yaml");
  EXPECT_EQ(s.user_config, fs::path("/h/.config/trainctl/config.yaml"));
  EXPECT_EQ(s.env, (std::map<std::string, std::string>{{"TRAINCTL_IMAGE", "e"}}));

  fs::remove(dir_ / "repo/.trainctl.yaml");
  s = discover_value_sources(dir_ / "repo/a/b", {{"XDG_CONFIG_HOME", "/x"}, {"HOME", "/h"}});
  EXPECT_TRUE(s.repo_config.empty());  // the search stops at the git root
  EXPECT_EQ(s.user_config, fs::path("/x/trainctl/config.yaml"));
}

class LayeredValuesTest : public ValuesTest {
 protected:
  void SetUp() override {
    ValuesTest::SetUp();
    sources_.repo_config = write("repo.yaml", "image: repo\nqueue: repo\nworker: {cpu: 1}\n");
    sources_.user_config = write("user.yaml", "image: user\nworker: {memory: 1Gi}\n");
    sources_.env = {{"TRAINCTL_IMAGE", "env"}};
    file1_ = write("v1.yaml", "image: file1\n");
    file2_ = write("v2.yaml", "image: file2\n");
  }
  ValueSources sources_;
  fs::path file1_, file2_;
};

TEST_F(LayeredValuesTest, RepoConfigIsTheBase) {
  ValueSources only_repo{sources_.repo_config, {}, {}};
  EXPECT_EQ(layered_values({.sources = only_repo})["image"], "repo");
}

TEST_F(LayeredValuesTest, UserConfigOverridesRepoAndMergesObjects) {
  ValueSources s{sources_.repo_config, sources_.user_config, {}};
  auto v = layered_values({.sources = s});
  EXPECT_EQ(v["image"], "user");
  EXPECT_EQ(v["queue"], "repo");
  EXPECT_EQ(v["worker"], nlohmann::json::parse(R"({"cpu":1,"memory":"1Gi"})"));
}

TEST_F(LayeredValuesTest, EnvOverridesUserConfig) {
  EXPECT_EQ(layered_values({.sources = sources_})["image"], "env");
}

TEST_F(LayeredValuesTest, ValuesFilesOverrideEnvInOrder) {
  EXPECT_EQ(layered_values({.sources = sources_, .values_files = {file1_}})["image"], "file1");
  EXPECT_EQ(layered_values({.sources = sources_, .values_files = {file1_, file2_}})["image"],
            "file2");
}

TEST_F(LayeredValuesTest, SetOverridesValuesFilesInOrder) {
  EXPECT_EQ(layered_values(
                {.sources = sources_, .values_files = {file2_}, .sets = {"image=set1"}})["image"],
            "set1");
  EXPECT_EQ(layered_values({.sources = sources_,
                            .values_files = {file2_},
                            .sets = {"image=set1", "image=set2"}})["image"],
            "set2");
  EXPECT_EQ(
      layered_values(
          {.sources = sources_, .sets = {"workers=3"}, .set_strings = {"workers=5"}})["workers"],
      "5");
}

// The whole order in one place: each layer sets its own key and every key of the layers below,
// so each key shows the highest layer that sets it.
TEST_F(LayeredValuesTest, PrecedenceIsConfigsEnvFilesFlagsSetSetString) {
  const std::vector<std::string> layers = {"repo", "user", "env", "file", "flags", "set", "string"};
  const auto layer_yaml = [&](std::size_t top) {
    std::string yaml;
    for (std::size_t i = 0; i <= top; ++i)
      yaml += "l" + std::to_string(i) + ": " + layers[top] + "\n";
    return yaml;
  };
  ValueSources sources{
      write("p-repo.yaml", layer_yaml(0)), write("p-user.yaml", layer_yaml(1)), {}};
  for (std::size_t i = 0; i <= 2; ++i)
    sources.env.emplace("TRAINCTL_L" + std::to_string(i), "env");
  ValueLayers all{.sources = sources, .values_files = {write("p-file.yaml", layer_yaml(3))}};
  for (std::size_t i = 0; i <= 4; ++i)
    all.flags["l" + std::to_string(i)] = "flags";
  for (std::size_t i = 0; i <= 6; ++i) {
    if (i <= 5)
      all.sets.push_back("l" + std::to_string(i) + "=set");
    all.set_strings.push_back("l" + std::to_string(i) + "=string");
  }
  nlohmann::json expected = nlohmann::json::object();
  for (std::size_t i = 0; i < layers.size(); ++i)
    expected["l" + std::to_string(i)] = "string";
  EXPECT_EQ(layered_values(all), expected);
  all.set_strings.clear();
  EXPECT_EQ(layered_values(all)["l5"], "set");
  EXPECT_EQ(layered_values(all)["l0"], "set");
  all.sets.clear();
  EXPECT_EQ(layered_values(all)["l4"], "flags");
  EXPECT_EQ(layered_values(all)["l0"], "flags");
  all.flags = nlohmann::json::object();
  EXPECT_EQ(layered_values(all)["l3"], "file");
  EXPECT_EQ(layered_values(all)["l0"], "file");
  all.values_files.clear();
  EXPECT_EQ(layered_values(all)["l2"], "env");
  EXPECT_EQ(layered_values(all)["l0"], "env");
  all.sources.env.clear();
  EXPECT_EQ(layered_values(all)["l1"], "user");
  EXPECT_EQ(layered_values(all)["l0"], "user");
}

TEST_F(LayeredValuesTest, ARoleCountAndItsSectionFromDifferentLayersAreKeptTogether) {
  ValueLayers count_in_file{.values_files = {write("ps-count.yaml", "ps: 2\n")},
                            .flags = {{"ps", {{"cpu", 4}}}}};
  EXPECT_EQ(layered_values(count_in_file)["ps"],
            nlohmann::json::parse(R"({"replicas":2,"cpu":4})"));
  ValueLayers section_in_file{.values_files = {write("ps-section.yaml", "ps: {cpu: 4}\n")},
                              .flags = {{"ps", 3}}};
  EXPECT_EQ(layered_values(section_in_file)["ps"],
            nlohmann::json::parse(R"({"replicas":3,"cpu":4})"));
}

TEST_F(LayeredValuesTest, MissingConfigFilesAreFineBadOnesAreNamed) {
  ValueSources missing{dir_ / "no-repo.yaml", dir_ / "no-user.yaml", {}};
  EXPECT_EQ(layered_values({.sources = missing}), nlohmann::json::object());
  EXPECT_THROW(layered_values({.sources = missing, .values_files = {dir_ / "no-values.yaml"}}),
               Error);
  ValueSources bad{write("bad.yaml", "a: [\n"), {}, {}};
  try {
    layered_values({.sources = bad});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("bad.yaml:"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace trainctl::render
