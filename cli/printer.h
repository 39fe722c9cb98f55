#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::cli {

/// The -o formats every verb accepts.
enum class OutputFormat { Table, Wide, Json, Yaml, Name };

/// Parses an -o value; throws Error(Usage) naming the allowed values.
OutputFormat parse_output_format(std::string_view value);

/// A table: column headers and rows of cells, printed kubectl-style (upper-case headers, columns
/// separated by three spaces, left-aligned).
struct Table {
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
};

void print_table(std::ostream& out, const Table& table);
/// The rows alone, as wide as the headers would make them (list -w's later rows).
void print_rows(std::ostream& out, const Table& table);
/// Prints a document as pretty JSON (two-space indent) or YAML.
void print_document(std::ostream& out, const nlohmann::json& doc, OutputFormat format);
/// Prints several documents: YAML as a stream separated by `---`, JSON as one object or, for
/// several, a v1 List as kubectl prints them.
void print_documents(std::ostream& out, const std::vector<nlohmann::json>& docs,
                     OutputFormat format);
/// `<resource>/<name>` for -o name, e.g. "tfjob.kubeflow.org/mnist"; `<unknown>` for an object not
/// named yet (generateName in a client dry run), as kubectl prints it.
void print_name(std::ostream& out, const nlohmann::json& object, std::string_view resource);

}  // namespace trainctl::cli
