#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::render {

/// The file name of template NAME: `NAME.yaml.mustache`.
inline constexpr std::string_view kTemplateSuffix = ".yaml.mustache";

/// Where a template was found, in lookup order.
enum class TemplateSource { Explicit, EnvPath, UserDir, Installed, SourceTree };

std::string_view to_string(TemplateSource source);

/// The places templates are looked up, highest priority first. Empty entries are skipped.
struct TemplateSearchPath {
  /// `--template FILE`: used whatever name is asked for.
  std::filesystem::path explicit_file;
  /// `$TRAINCTL_TEMPLATE_PATH`, ':'-separated.
  std::vector<std::filesystem::path> env_dirs;
  /// `~/.config/trainctl/templates` (honouring $XDG_CONFIG_HOME).
  std::filesystem::path user_dir;
  /// `<prefix>/share/trainctl/templates`.
  std::filesystem::path install_dir;
  /// The source tree's `templates/`, for tests and running from a build directory.
  std::filesystem::path source_dir;
};

/// Builds the search path from an environment ($TRAINCTL_TEMPLATE_PATH, $XDG_CONFIG_HOME, $HOME).
TemplateSearchPath template_search_path(const std::map<std::string, std::string>& environ,
                                        std::filesystem::path install_dir,
                                        std::filesystem::path explicit_file = {},
                                        std::filesystem::path source_dir = {});

/// One template file and where it came from.
struct TemplateInfo {
  std::string name;
  std::filesystem::path path;
  TemplateSource source;

  /// Whether it is a template shipped with trainctl (installed, or the source tree's), whose
  /// values render/value_schema.h describes, rather than one of the user's own.
  bool shipped() const {
    return source == TemplateSource::Installed || source == TemplateSource::SourceTree;
  }
};

/// The template NAME resolves to. Throws Error(Usage) listing the directories searched when
/// there is none, or when the explicit file does not exist.
TemplateInfo find_template(const TemplateSearchPath& search, std::string_view name);

/// Every template visible on the search path, one per name (the one `find_template` would
/// pick), sorted by name.
std::vector<TemplateInfo> list_templates(const TemplateSearchPath& search);

/// The text of a template file; Error(Validation) naming the file when unreadable.
std::string read_template(const TemplateInfo& info);

/// Copies template NAME to `dir/NAME.yaml.mustache` (creating `dir`) and returns that path.
/// Refuses with Error(Usage) when the file exists, unless `force`.
std::filesystem::path export_template(const TemplateSearchPath& search, std::string_view name,
                                      const std::filesystem::path& dir, bool force = false);

}  // namespace trainctl::render
