#pragma once

// Job manifests as users write them: multi-document YAML or JSON, with where each field came from.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::api {

/// Where each field of one manifest was written, so errors can point at file and line.
/// Paths are dotted with indices in brackets: `spec.tfReplicaSpecs.Worker.replicas`,
/// `spec.tfReplicaSpecs.Worker.template.spec.containers[0].image`; "" is the document itself.
struct SourceMap {
  std::string file;
  std::map<std::string, int, std::less<>> lines;  // path -> 1-based line

  /// The line of `path`, or of its nearest recorded parent (a field the user left out points at
  /// the object that should hold it); 0 when nothing is recorded.
  int line_of(std::string_view path) const;
  /// Moves every path under `from` to `to`, as when defaulting renames a map key.
  void rename_prefix(std::string_view from, std::string_view to);
};

/// One Kubernetes object read from a file.
struct Manifest {
  nlohmann::json object;
  SourceMap source;
};

/// Parses every document of `text` (YAML with `---` separators, or JSON, which is YAML too);
/// empty documents are skipped. `file` names the input in messages ("-" for stdin). Throws
/// Error(Validation) as `file:line: invalid UTF-8 byte 0xff at column 12` for text that is not
/// UTF-8, `file:line:col: <parser message>` for a syntax error and `file:line: document N: ...`
/// for a document that is not a mapping.
std::vector<Manifest> parse_manifests(std::string_view text, std::string file);

/// Whether `object` is a list of objects (`kind: List`, or a kind ending in List such as
/// TFJobList, with an `items` array), as `kubectl get -o yaml` of several objects prints.
bool is_list(const nlohmann::json& object);
/// The items of a list manifest (is_list) as manifests of their own, each with its lines.
std::vector<Manifest> list_items(Manifest list);

/// `parent.key`, or `key` at the top.
std::string field_path(std::string_view parent, std::string_view key);
/// `parent[index]`.
std::string field_path(std::string_view parent, std::size_t index);

}  // namespace trainctl::api
