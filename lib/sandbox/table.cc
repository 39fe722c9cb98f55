#include "sandbox/table.h"

#include <fmt/format.h>

#include <cstdint>
#include <ctime>

#include "api/status.h"
#include "json_access.h"
#include "text.h"

namespace trainctl::sandbox {

using nlohmann::json;

std::int64_t integer_member(const json& object, std::string_view key) {
  const json& v = member(object, key);
  return v.is_number_integer() ? v.get<std::int64_t>() : 0;
}

const json& array_member(const json& object, std::string_view key) {
  static const json empty = json::array();
  const json& v = member(object, key);
  return v.is_array() ? v : empty;
}

std::string cell_text(const json& v) {
  if (v.is_null())
    return "";
  if (v.is_string())
    return v.get<std::string>();
  return v.dump();
}

std::string or_none(std::string s) {
  return s.empty() ? "<none>" : s;
}

std::vector<PrintColumn> custom_columns(const json& printer_columns) {
  std::vector<PrintColumn> cols{name_column()};
  bool has_age = false;
  for (const auto& c : printer_columns) {
    const std::string path = c.value("jsonPath", "");
    const bool date = c.value("type", "") == "date";
    cols.push_back({c.value("name", ""), c.value("type", "string"), c.value("description", ""),
                    c.value("priority", 0), [path, date](const json& obj, TablePrintTime now) {
                      json value = evaluate_json_path(obj, path);
                      if (date && value.is_string()) {
                        if (const auto t = api::parse_timestamp(value.get<std::string>())) {
                          value = api::human_duration(
                              std::chrono::duration_cast<std::chrono::seconds>(now - *t));
                        }
                      }
                      return value.is_null() ? json("") : value;
                    }});
    has_age = has_age || to_lower(c.value("name", "")) == "age";
  }
  if (!has_age)
    cols.push_back(age_column());
  return cols;
}

bool wants_table(std::string_view accept) {
  return accept.find("as=Table") != std::string_view::npos;
}

json evaluate_json_path(const json& object, std::string_view path) {
  std::string_view p = trim(path);
  if (p.starts_with("{") && p.ends_with("}"))
    p = p.substr(1, p.size() - 2);
  if (p.starts_with("$"))
    p.remove_prefix(1);
  const json* cur = &object;
  while (!p.empty()) {
    if (p.front() == '.') {
      p.remove_prefix(1);
      const size_t end = p.find_first_of(".[");
      const std::string key(p.substr(0, end));
      if (!cur->is_object() || !cur->contains(key))
        return nullptr;
      cur = &(*cur)[key];
      p = end == std::string_view::npos ? std::string_view() : p.substr(end);
    } else if (p.front() == '[') {
      const size_t close = p.find(']');
      if (close == std::string_view::npos)
        return nullptr;
      const std::string index(p.substr(1, close - 1));
      p.remove_prefix(close + 1);
      if (!cur->is_array())
        return nullptr;
      try {
        // "[-1:]" (the Kubeflow CRDs' last condition) and "[-1]" count from the end.
        const long i = std::stol(index.ends_with(":") ? index.substr(0, index.size() - 1) : index);
        const long size = static_cast<long>(cur->size());
        const long at = i < 0 ? size + i : i;
        if (at < 0 || at >= size)
          return nullptr;
        cur = &(*cur)[static_cast<size_t>(at)];
      } catch (const std::exception&) {
        return nullptr;  // filters such as [?(@.type=="Ready")] are not evaluated
      }
    } else {
      return nullptr;
    }
  }
  return *cur;
}

json to_table(const std::vector<PrintColumn>& columns, const std::vector<json>& objects,
              std::string_view include_object, std::chrono::system_clock::time_point now) {
  json definitions = json::array();
  for (const auto& c : columns) {
    definitions.push_back({{"name", c.name},
                           {"type", c.type},
                           {"format", c.name == "Name" ? "name" : ""},
                           {"description", c.description},
                           {"priority", c.priority}});
  }
  json rows = json::array();
  for (const auto& obj : objects) {
    json cells = json::array();
    for (const auto& c : columns)
      cells.push_back(c.cell(obj, now));
    json row = {{"cells", std::move(cells)}};
    if (include_object == "Object") {
      row["object"] = obj;
    } else if (include_object != "None") {
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", object_member(obj, "metadata")}};
    }
    rows.push_back(std::move(row));
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", json::object()},
          {"columnDefinitions", definitions},
          {"rows", rows}};
}

json to_table(const ResourceInfo& info, const std::vector<json>& objects,
              const json& printer_columns, std::string_view include_object,
              std::chrono::system_clock::time_point now) {
  const StrategyPtr builtin = builtin_strategy(info.group_resource());
  const std::vector<PrintColumn> columns =
      builtin ? builtin->columns(info.version)
      : printer_columns.is_array() && !printer_columns.empty()
          ? custom_columns(printer_columns)
          : std::vector<PrintColumn>{name_column(), age_column()};
  return to_table(columns, objects, include_object, now);
}

}  // namespace trainctl::sandbox
