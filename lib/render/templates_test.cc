#include "render/templates.h"

#include <gtest/gtest.h>

#include <fstream>

#include "error.h"

namespace trainctl::render {
namespace {

namespace fs = std::filesystem;

class TemplatesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("trainctl_templates_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    for (const char* d : {"env1", "env2", "user", "install"})
      fs::create_directories(dir_ / d);
    search_.env_dirs = {dir_ / "env1", dir_ / "env2"};
    search_.user_dir = dir_ / "user";
    search_.install_dir = dir_ / "install";
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const fs::path& p, const std::string& text) {
    std::ofstream(p) << text;
    return p;
  }
  fs::path dir_;
  TemplateSearchPath search_;
};

TEST_F(TemplatesTest, LookupOrderExplicitEnvUserInstalled) {
  write(dir_ / "install/job.yaml.mustache", "install");
  EXPECT_EQ(find_template(search_, "job").source, TemplateSource::Installed);
  EXPECT_TRUE(find_template(search_, "job").shipped());
  write(dir_ / "user/job.yaml.mustache", "user");
  EXPECT_EQ(find_template(search_, "job").source, TemplateSource::UserDir);
  EXPECT_FALSE(find_template(search_, "job").shipped());  // the user's own: no value schema
  write(dir_ / "env2/job.yaml.mustache", "env2");
  EXPECT_EQ(find_template(search_, "job").path, dir_ / "env2/job.yaml.mustache");
  write(dir_ / "env1/job.yaml.mustache", "env1");
  TemplateInfo info = find_template(search_, "job");
  EXPECT_EQ(info.source, TemplateSource::EnvPath);
  EXPECT_EQ(read_template(info), "env1");
  search_.explicit_file = write(dir_ / "mine.yaml", "explicit");
  info = find_template(search_, "job");
  EXPECT_EQ(info.source, TemplateSource::Explicit);
  EXPECT_EQ(read_template(info), "explicit");
}

TEST_F(TemplatesTest, NotFoundListsSearchedDirs) {
  try {
    find_template(search_, "nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(e.message().find("'nope'"), std::string::npos);
    EXPECT_NE(e.message().find((dir_ / "install").string()), std::string::npos) << e.message();
  }
  search_.explicit_file = dir_ / "missing.yaml";
  EXPECT_THROW(find_template(search_, "tfjob"), Error);
  search_.explicit_file.clear();
  EXPECT_THROW(find_template(search_, "../etc"), Error);
}

TEST_F(TemplatesTest, ListShowsOneEntryPerNameFromTheWinningSource) {
  write(dir_ / "install/tfjob.yaml.mustache", "i");
  write(dir_ / "install/mpijob.yaml.mustache", "i");
  write(dir_ / "user/tfjob.yaml.mustache", "u");
  write(dir_ / "env2/custom.yaml.mustache", "c");
  write(dir_ / "env2/README.md", "not a template");
  auto list = list_templates(search_);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].name, "custom");
  EXPECT_EQ(list[0].source, TemplateSource::EnvPath);
  EXPECT_EQ(list[1].name, "mpijob");
  EXPECT_EQ(list[1].source, TemplateSource::Installed);
  EXPECT_EQ(list[2].name, "tfjob");
  EXPECT_EQ(list[2].source, TemplateSource::UserDir);
  EXPECT_EQ(to_string(list[2].source), "user");
}

TEST_F(TemplatesTest, SearchPathFromEnvironment) {
  auto s = template_search_path({{"TRAINCTL_TEMPLATE_PATH", "/a::/b"}, {"HOME", "/home/u"}},
                                "/usr/share/trainctl/templates", "", "/src/templates");
  EXPECT_EQ(s.env_dirs, (std::vector<fs::path>{"/a", "/b"}));
  EXPECT_EQ(s.user_dir, fs::path("/home/u/.config/trainctl/templates"));
  EXPECT_EQ(s.install_dir, fs::path("/usr/share/trainctl/templates"));
  EXPECT_EQ(s.source_dir, fs::path("/src/templates"));
}

TEST_F(TemplatesTest, ExportRefusesToOverwriteUnlessForced) {
  write(dir_ / "install/tfjob.yaml.mustache", "v1");
  fs::path out = export_template(search_, "tfjob", dir_ / "out/new");
  EXPECT_EQ(out, dir_ / "out/new/tfjob.yaml.mustache");
  EXPECT_EQ(read_template({"tfjob", out, TemplateSource::Explicit}), "v1");
  write(out, "edited");
  try {
    export_template(search_, "tfjob", dir_ / "out/new");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Usage);
    EXPECT_NE(e.message().find("already exists"), std::string::npos);
  }
  EXPECT_EQ(read_template({"tfjob", out, TemplateSource::Explicit}), "edited");
  export_template(search_, "tfjob", dir_ / "out/new", true);
  EXPECT_EQ(read_template({"tfjob", out, TemplateSource::Explicit}), "v1");
}

TEST(BuiltinTemplates, SourceTreeHasTheThreeKinds) {
  TemplateSearchPath search;
  search.source_dir = fs::path(TRAINCTL_SOURCE_DIR) / "templates";
  auto list = list_templates(search);
  std::vector<std::string> names;
  for (const auto& t : list)
    names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"mpijob", "pytorchjob", "tfjob"}));
}

}  // namespace
}  // namespace trainctl::render
