#include "printer.h"

#include <fmt/format.h>

#include <algorithm>

#include "error.h"
#include "yaml_json.h"

namespace trainctl::cli {

OutputFormat parse_output_format(std::string_view value) {
  if (value.empty() || value == "table")
    return OutputFormat::Table;
  if (value == "wide")
    return OutputFormat::Wide;
  if (value == "json")
    return OutputFormat::Json;
  if (value == "yaml")
    return OutputFormat::Yaml;
  if (value == "name")
    return OutputFormat::Name;
  throw Error(ErrorKind::Usage,
              fmt::format("unknown output format {:?}: allowed are json, yaml, name, wide", value));
}

namespace {

void print_aligned(std::ostream& out, const Table& table, bool headers) {
  std::vector<size_t> widths(table.headers.size(), 0);
  auto measure = [&widths](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < widths.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  };
  measure(table.headers);
  for (const auto& row : table.rows)
    measure(row);
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t i = 0; i < widths.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      line += i + 1 == widths.size() ? cell : fmt::format("{:<{}}   ", cell, widths[i]);
    }
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out << line << '\n';
  };
  if (headers)
    print_row(table.headers);
  for (const auto& row : table.rows)
    print_row(row);
}

}  // namespace

void print_table(std::ostream& out, const Table& table) {
  print_aligned(out, table, true);
}

void print_rows(std::ostream& out, const Table& table) {
  print_aligned(out, table, false);
}

void print_document(std::ostream& out, const nlohmann::json& doc, OutputFormat format) {
  if (format == OutputFormat::Yaml) {
    out << json_to_yaml(doc);
  } else {
    // User data that is not UTF-8 prints with U+FFFD rather than throwing.
    out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  }
}

void print_documents(std::ostream& out, const std::vector<nlohmann::json>& docs,
                     OutputFormat format) {
  if (format == OutputFormat::Json) {
    print_document(out,
                   docs.size() == 1
                       ? docs[0]
                       : nlohmann::json{{"apiVersion", "v1"}, {"kind", "List"}, {"items", docs}},
                   format);
    return;
  }
  for (std::size_t i = 0; i < docs.size(); ++i) {
    if (i > 0)
      out << "---\n";
    print_document(out, docs[i], format);
  }
}

void print_name(std::ostream& out, const nlohmann::json& object, std::string_view resource) {
  const std::string name = object.value("metadata", nlohmann::json::object()).value("name", "");
  // A job the server has not named yet (generateName, a client dry run): kubectl's placeholder.
  out << resource << '/' << (name.empty() ? "<unknown>" : name) << '\n';
}

}  // namespace trainctl::cli
