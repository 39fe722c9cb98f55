#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "render/value_schema.h"

namespace trainctl::render {

/// Checks one layer of values before it is merged (check_values against a built-in template's
/// schema); empty = no check, as for a template of the user's own.
using LayerCheck = std::function<void(const nlohmann::json& layer, const ValueOrigin& origin)>;

/// Reads a YAML values file (a mapping; an empty file is {}). Scalars are typed by the YAML 1.2
/// core schema. Errors are ErrorKind::Validation naming `file:line:col`.
nlohmann::json load_values_file(const std::filesystem::path& path);

/// Applies one Helm-like `--set` assignment `PATH=VALUE` to `values`.
/// PATH is dot-separated keys (`a.b.c`), each optionally followed by array indexes (`a.b[0]`,
/// `m[1][2]`); missing objects and arrays are created (arrays padded with null); `\.`, `\=`,
/// `\[` and `\\` escape. VALUE is typed by the YAML 1.2 core schema (`4` is an int, `true` a bool,
/// empty or `null` is null, `foo:1` a string) unless `force_string` (`--set-string`). One
/// assignment per call: commas are part of the value. Malformed input is ErrorKind::Usage naming
/// the assignment.
void set_value(nlohmann::json& values, std::string_view assignment, bool force_string = false);

/// set_value, then `check` (when set) of the value the assignment changed: its whole top-level
/// key, as merged, labelled "--set ASSIGNMENT" (or "--set-string ...").
void set_checked_value(nlohmann::json& values, std::string_view assignment, bool force_string,
                       const LayerCheck& check);

/// Merges `overlay` into `base`: objects merge key by key, recursively; anything else (arrays,
/// scalars, null) in `overlay` replaces what `base` had.
void deep_merge(nlohmann::json& base, const nlohmann::json& overlay);

/// Rejects render values (from a flag, --set or a values file) that are not UTF-8 or hold a
/// control character other than tab, LF and CR, before they reach a template: JSON takes nothing
/// but UTF-8, and YAML, so the rendered manifest, no other control character. Error(Usage) names
/// the first offending value's path, byte and offset.
void require_printable(const nlohmann::json& values, const std::string& path = "");

/// Turns `TRAINCTL_*` environment variables into values. After the prefix, `__` separates path
/// segments and `_` separates words of a segment, joined lower camelCase:
/// TRAINCTL_IMAGE -> image, TRAINCTL_PRIORITY_CLASS -> priorityClass,
/// TRAINCTL_WORKER__CPU -> worker.cpu, TRAINCTL_NODE_SELECTOR__POOL -> nodeSelector.pool.
/// Values are typed like `--set`. Variables that configure trainctl rather than a job are
/// skipped: TRAINCTL_TEMPLATE_PATH, TRAINCTL_CONFIG, TRAINCTL_BINARY and TRAINCTL_TEST_*.
nlohmann::json env_values(const std::map<std::string, std::string>& env);

/// Where layered defaults come from; an empty path or a missing file contributes nothing.
struct ValueSources {
  /// `.trainctl.yaml` found by walking up from the working directory to the git root or /.
  std::filesystem::path repo_config;
  /// `$XDG_CONFIG_HOME/trainctl/config.yaml`, else `~/.config/trainctl/config.yaml`.
  std::filesystem::path user_config;
  /// The process's `TRAINCTL_*` variables (others are ignored).
  std::map<std::string, std::string> env;
};

/// The directory of the user's trainctl configuration: `$XDG_CONFIG_HOME/trainctl` when set and
/// non-empty, else `$HOME/.config/trainctl`; empty when neither variable is set.
std::filesystem::path user_config_dir(const std::map<std::string, std::string>& environ);

/// Finds the sources for a run from `cwd` and an environment (all variables, e.g. from
/// `process_environment()`).
ValueSources discover_value_sources(const std::filesystem::path& cwd,
                                    const std::map<std::string, std::string>& environ);

/// The current process's environment as a map.
std::map<std::string, std::string> process_environment();

/// Every layer of values a render takes, lowest first.
struct ValueLayers {
  ValueSources sources;
  std::vector<std::filesystem::path> values_files;
  /// The typed flags' values (submit's --image, --workers, ...), already checked by the flags.
  nlohmann::json flags = nlohmann::json::object();
  std::vector<std::string> sets;
  std::vector<std::string> set_strings;
};

/// The render context, and the one place its precedence is defined: repo config < user config <
/// TRAINCTL_* env < each `--values` file in order < the typed flags < each `--set` in order <
/// each `--set-string` in order. Each layer is deep-merged over the ones before it, after `check`
/// (when set) has accepted it: the config files and each TRAINCTL_* variable as shared defaults,
/// each values file by its path, each assignment as set_checked_value does (the flags checked
/// themselves). A TFJob role that is both a count and a section (`ps: 2` in one layer, `ps:
/// {cpu: 4}` in another) keeps both, as `{replicas: 2, cpu: 4}`.
nlohmann::json layered_values(const ValueLayers& layers, const LayerCheck& check = {});

}  // namespace trainctl::render
