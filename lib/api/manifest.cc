#include "api/manifest.h"

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <utility>

#include "error.h"
#include "json_access.h"
#include "text.h"
#include "yaml_json.h"

namespace trainctl::api {
namespace {

using nlohmann::json;

/// Converts a node to JSON as yaml_to_json does, recording the line of every field and item.
json to_json_with_lines(const YAML::Node& node, const std::string& path, SourceMap& source) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json obj = json::object();
      for (const auto& kv : node) {
        const auto key = kv.first.as<std::string>();
        const std::string child = field_path(path, key);
        source.lines.emplace(child, kv.first.Mark().line + 1);
        obj[key] = to_json_with_lines(kv.second, child, source);
      }
      return obj;
    }
    case YAML::NodeType::Sequence: {
      json arr = json::array();
      std::size_t index = 0;
      for (const auto& item : node) {
        const std::string child = field_path(path, index++);
        source.lines.emplace(child, item.Mark().line + 1);
        arr.push_back(to_json_with_lines(item, child, source));
      }
      return arr;
    }
    case YAML::NodeType::Scalar:
      return yaml_scalar_to_json(node);
    default:
      return nullptr;
  }
}

std::string_view type_name(YAML::NodeType::value type) {
  switch (type) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "a scalar";
    default:
      return "empty";
  }
}

/// The 1-based line of the first key of a mapping (its own mark may sit on a `---`).
int first_line(const YAML::Node& node) {
  if (node.IsMap() && node.begin() != node.end())
    return node.begin()->first.Mark().line + 1;
  return node.Mark().line + 1;
}

/// Rejects text that is not UTF-8 (JSON, and so the API, takes nothing else) as
/// `file:line: invalid UTF-8 byte 0xff at column 12`, the column counted in bytes from 1.
/// The 1-based line and column of byte `offset` of `text`.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t offset) {
  const std::string_view before = text.substr(0, offset);
  const auto line = static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n')) + 1;
  const std::size_t newline = before.rfind('\n');
  return {line, newline == std::string_view::npos ? offset + 1 : offset - newline};
}

void require_utf8(std::string_view text, const std::string& file) {
  const auto offset = invalid_utf8_offset(text);
  if (!offset)
    return;
  const auto [line, column] = line_and_column(text, *offset);
  const auto byte = static_cast<unsigned char>(text[*offset]);
  // yaml-cpp would read UTF-16, though not always into valid UTF-8; kubectl reads only UTF-8.
  const bool other_encoding =
      *offset == 0 && (text.starts_with("\xff\xfe") || text.starts_with("\xfe\xff"));
  throw Error(
      ErrorKind::Validation,
      fmt::format("{}:{}: invalid UTF-8 byte {:#04x} at column {}{}", file, line, byte, column,
                  other_encoding ? " (a UTF-16 byte order mark: save the file as UTF-8)" : ""));
}

/// YAML allows no control characters but tab, line feed and carriage return (its c-printable);
/// yaml-cpp 0.7 reads a NUL into a key that is not UTF-8. Go's parser (kubectl's) refuses them.
void require_printable(std::string_view text, const std::string& file) {
  const auto control = std::find_if(text.begin(), text.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && c != '\t' && c != '\n' && c != '\r') || byte == 0x7f;
  });
  if (control == text.end())
    return;
  const auto offset = static_cast<std::size_t>(control - text.begin());
  const auto [line, column] = line_and_column(text, offset);
  throw Error(ErrorKind::Validation,
              fmt::format("{}:{}: control character {:#04x} at column {}: YAML does not allow "
                          "control characters",
                          file, line, static_cast<unsigned char>(*control), column));
}

/// yaml-cpp 0.7's LoadAll never returns on a token no node can start with, such as a `,` outside
/// a flow collection (`"a", "b"`): its parser reports an empty document there without consuming
/// the token, again and again, allocating each time (jbeder/yaml-cpp#1040, fixed after 0.8.0).
/// Walks the documents' events first and rejects a document that starts where the previous one
/// did, in the words of Go's YAML parser (kubectl's).
void require_progress(const std::string& text, const std::string& file) {
  struct DocumentStarts : YAML::EventHandler {
    std::optional<YAML::Mark> previous, current;
    void OnDocumentStart(const YAML::Mark& mark) override {
      previous = std::exchange(current, mark);
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
  } starts;
  std::istringstream in(text);
  YAML::Parser parser(in);
  while (parser.HandleNextDocument(starts)) {
    if (starts.previous && starts.previous->pos == starts.current->pos)
      throw Error(ErrorKind::Validation,
                  fmt::format("{}:{}:{}: did not find expected node content", file,
                              starts.current->line + 1, starts.current->column + 1));
  }
}

}  // namespace

std::string field_path(std::string_view parent, std::string_view key) {
  if (parent.empty())
    return std::string(key);
  return fmt::format("{}.{}", parent, key);
}

std::string field_path(std::string_view parent, std::size_t index) {
  return fmt::format("{}[{}]", parent, index);
}

int SourceMap::line_of(std::string_view path) const {
  while (true) {
    if (auto it = lines.find(path); it != lines.end())
      return it->second;
    if (path.empty())
      return 0;
    const std::size_t cut = path.find_last_of(".[");
    path = cut == std::string_view::npos ? std::string_view() : path.substr(0, cut);
  }
}

void SourceMap::rename_prefix(std::string_view from, std::string_view to) {
  std::vector<std::pair<std::string, int>> moved;
  for (auto it = lines.lower_bound(from); it != lines.end() && it->first.starts_with(from);) {
    const std::string_view rest = std::string_view(it->first).substr(from.size());
    if (!rest.empty() && rest[0] != '.' && rest[0] != '[') {
      ++it;  // "Worker2" is not under "Worker"
      continue;
    }
    moved.emplace_back(fmt::format("{}{}", to, rest), it->second);
    it = lines.erase(it);
  }
  for (auto& [path, line] : moved)
    lines.insert_or_assign(std::move(path), line);
}

bool is_list(const nlohmann::json& object) {
  const nlohmann::json& kind = member(object, "kind");
  return kind.is_string() && kind.get_ref<const std::string&>().ends_with("List") &&
         member(object, "items").is_array();
}

std::vector<Manifest> list_items(Manifest list) {
  std::vector<Manifest> items;
  nlohmann::json& array = list.object["items"];
  for (std::size_t i = 0; i < array.size(); ++i) {
    Manifest item{.object = std::move(array[i]), .source = {.file = list.source.file, .lines = {}}};
    const std::string prefix = field_path("items", i);
    const auto& lines = list.source.lines;
    for (auto it = lines.lower_bound(prefix); it != lines.end() && it->first.starts_with(prefix);
         ++it) {
      std::string_view rest = std::string_view(it->first).substr(prefix.size());
      if (!rest.empty() && rest[0] != '.' && rest[0] != '[')
        continue;  // items[10] is not under items[1]
      if (rest.starts_with('.'))
        rest.remove_prefix(1);
      item.source.lines.emplace(rest, it->second);
    }
    items.push_back(std::move(item));
  }
  return items;
}

std::vector<Manifest> parse_manifests(std::string_view text, std::string file) {
  require_utf8(text, file);
  require_printable(text, file);
  std::vector<YAML::Node> documents;
  try {
    const std::string input(text);
    require_progress(input, file);
    documents = YAML::LoadAll(input);
  } catch (const YAML::Exception& e) {
    throw Error(ErrorKind::Validation,
                fmt::format("{}:{}:{}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  std::vector<Manifest> manifests;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const YAML::Node& doc = documents[i];
    if (doc.IsNull() || !doc.IsDefined())
      continue;
    if (!doc.IsMap()) {
      throw Error(
          ErrorKind::Validation,
          fmt::format("{}:{}: document {}: expected a mapping (a Kubernetes object), got {}", file,
                      first_line(doc), i + 1, type_name(doc.Type())));
    }
    Manifest manifest;
    manifest.source.file = file;
    manifest.source.lines.emplace("", first_line(doc));
    try {
      manifest.object = to_json_with_lines(doc, "", manifest.source);
    } catch (const YAML::Exception& e) {  // a key that is itself a map or a list
      throw Error(ErrorKind::Validation,
                  fmt::format("{}:{}:{}: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
    manifests.push_back(std::move(manifest));
  }
  return manifests;
}

}  // namespace trainctl::api
