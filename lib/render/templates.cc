#include "render/templates.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "error.h"
#include "render/values.h"

namespace trainctl::render {
namespace {

/// The directories to search, in order, paired with the source they stand for.
std::vector<std::pair<std::filesystem::path, TemplateSource>> search_dirs(
    const TemplateSearchPath& search) {
  std::vector<std::pair<std::filesystem::path, TemplateSource>> dirs;
  for (const auto& dir : search.env_dirs)
    if (!dir.empty())
      dirs.emplace_back(dir, TemplateSource::EnvPath);
  if (!search.user_dir.empty())
    dirs.emplace_back(search.user_dir, TemplateSource::UserDir);
  if (!search.install_dir.empty())
    dirs.emplace_back(search.install_dir, TemplateSource::Installed);
  if (!search.source_dir.empty())
    dirs.emplace_back(search.source_dir, TemplateSource::SourceTree);
  return dirs;
}

/// NAME for `NAME.yaml.mustache`, empty for any other file name.
std::string template_name_of(const std::filesystem::path& file) {
  std::string base = file.filename().string();
  if (base.size() <= kTemplateSuffix.size() || !base.ends_with(kTemplateSuffix))
    return {};
  return base.substr(0, base.size() - kTemplateSuffix.size());
}

bool is_file(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

}  // namespace

std::string_view to_string(TemplateSource source) {
  switch (source) {
    case TemplateSource::Explicit:
      return "--template";
    case TemplateSource::EnvPath:
      return "TRAINCTL_TEMPLATE_PATH";
    case TemplateSource::UserDir:
      return "user";
    case TemplateSource::Installed:
      return "installed";
    case TemplateSource::SourceTree:
      return "source";
  }
  return "unknown";
}

TemplateSearchPath template_search_path(const std::map<std::string, std::string>& environ_map,
                                        std::filesystem::path install_dir,
                                        std::filesystem::path explicit_file,
                                        std::filesystem::path source_dir) {
  TemplateSearchPath search;
  search.explicit_file = std::move(explicit_file);
  if (auto it = environ_map.find("TRAINCTL_TEMPLATE_PATH"); it != environ_map.end()) {
    std::string_view rest = it->second;
    while (true) {
      size_t colon = rest.find(':');
      std::string_view dir = rest.substr(0, colon);
      if (!dir.empty())
        search.env_dirs.emplace_back(std::string(dir));
      if (colon == std::string_view::npos)
        break;
      rest.remove_prefix(colon + 1);
    }
  }
  std::filesystem::path config = user_config_dir(environ_map);
  if (!config.empty())
    search.user_dir = config / "templates";
  search.install_dir = std::move(install_dir);
  search.source_dir = std::move(source_dir);
  return search;
}

TemplateInfo find_template(const TemplateSearchPath& search, std::string_view name) {
  if (!search.explicit_file.empty()) {
    if (!is_file(search.explicit_file))
      throw Error(ErrorKind::Usage,
                  fmt::format("--template {}: no such file", search.explicit_file.string()));
    return {std::string(name), search.explicit_file, TemplateSource::Explicit};
  }
  if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..")
    throw Error(ErrorKind::Usage, fmt::format("invalid template name '{}'", name));
  std::vector<std::string> searched;
  for (const auto& [dir, source] : search_dirs(search)) {
    std::filesystem::path candidate = dir / (std::string(name) + std::string(kTemplateSuffix));
    if (is_file(candidate))
      return {std::string(name), candidate, source};
    searched.push_back(dir.string());
  }
  throw Error(ErrorKind::Usage,
              fmt::format("template '{}' not found (searched: {})", name,
                          searched.empty() ? std::string("nothing")
                                           : fmt::format("{}", fmt::join(searched, ", "))));
}

std::vector<TemplateInfo> list_templates(const TemplateSearchPath& search) {
  std::map<std::string, TemplateInfo> found;
  if (!search.explicit_file.empty() && is_file(search.explicit_file)) {
    std::string name = template_name_of(search.explicit_file);
    if (name.empty())
      name = search.explicit_file.stem().string();
    found.emplace(name, TemplateInfo{name, search.explicit_file, TemplateSource::Explicit});
  }
  for (const auto& [dir, source] : search_dirs(search)) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
      files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::string name = template_name_of(file);
      if (!name.empty() && is_file(file))
        found.emplace(name, TemplateInfo{name, file, source});  // first one wins
    }
  }
  std::vector<TemplateInfo> out;
  for (auto& [name, info] : found)
    out.push_back(std::move(info));
  return out;
}

std::string read_template(const TemplateInfo& info) {
  std::ifstream in(info.path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::Validation,
                fmt::format("{}: cannot read template '{}'", info.path.string(), info.name));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::filesystem::path export_template(const TemplateSearchPath& search, std::string_view name,
                                      const std::filesystem::path& dir, bool force) {
  TemplateInfo info = find_template(search, name);
  std::string text = read_template(info);
  std::filesystem::path target = dir / (std::string(name) + std::string(kTemplateSuffix));
  std::error_code ec;
  if (std::filesystem::exists(target, ec) && !force)
    throw Error(ErrorKind::Usage,
                fmt::format("{}: already exists (use --force to overwrite)", target.string()));
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(target, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out)
    throw Error(ErrorKind::Usage, fmt::format("{}: cannot write", target.string()));
  return target;
}

}  // namespace trainctl::render
