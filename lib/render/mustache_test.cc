#include "render/mustache.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <kainjow/mustache.hpp>
#include <random>
#include <string>
#include <vector>

namespace trainctl::render {
namespace {

using nlohmann::json;
namespace kainjow_mustache = kainjow::mustache;

// The reference: kainjow/mustache, the engine trainctl rendered with before its own, over the
// copy of the context it was given (members YAML-spelled, `json:KEY` siblings), unescaped.
kainjow_mustache::data reference_element(const json& v);

kainjow_mustache::data reference_object(const json& obj) {
  kainjow_mustache::data out{kainjow_mustache::data::type::object};
  for (const auto& [key, v] : obj.items()) {
    if (v.is_null())
      continue;
    out.set("json:" + key, flow(v));
    if (falsy(v))
      out.set(key, false);
    else if (v.is_object())
      out.set(key, reference_object(v));
    else if (v.is_array())
      out.set(key, reference_element(v));
    else if (v.is_boolean())
      out.set(key, true);
    else
      out.set(key, v.dump());
  }
  return out;
}

kainjow_mustache::data reference_element(const json& v) {
  if (v.is_object())
    return reference_object(v);
  if (v.is_array()) {
    kainjow_mustache::data list{kainjow_mustache::data::type::list};
    for (const auto& item : v)
      list.push_back(reference_element(item));
    return list;
  }
  return kainjow_mustache::data(v.dump());
}

struct Rendered {
  std::string text;
  std::string error;
};

Rendered reference(const std::string& tmpl, const json& context) {
  kainjow_mustache::mustache m(tmpl);
  m.set_custom_escape([](const std::string& s) { return s; });
  std::string text = m.render(reference_object(context));
  return {m.is_valid() ? text : "", m.error_message()};
}

Rendered ours(const std::string& tmpl, const json& context) {
  Mustache m(tmpl);
  std::string text = m.render(context);
  return {m.error().empty() ? text : "", m.error()};
}

void expect_as_reference(const std::string& tmpl, const json& context) {
  const Rendered want = reference(tmpl, context), got = ours(tmpl, context);
  EXPECT_EQ(got.error, want.error)
      << "template: " << json(tmpl).dump() << "\ncontext: " << context.dump();
  EXPECT_EQ(got.text, want.text) << "template: " << json(tmpl).dump()
                                 << "\ncontext: " << context.dump();
}

TEST(MustacheTest, RendersAsKainjowOnTheCasesTemplatesUse) {
  const json context = {
      {"name", "mnist"},
      {"workers", 4},
      {"gpus", 0},
      {"enabled", true},
      {"off", false},
      {"none", nullptr},
      {"empty", ""},
      {"labels", {{"team", "a"}, {"tier", 1}}},
      {"env", json::array({{{"name", "A"}, {"value", "1"}}, {{"name", "B"}, {"value", "2"}}})},
      {"args", json::array({"--lr", 0.1, false, nullptr, json::array()})},
      {"nothing", json::array()},
      {"roles", {{"worker", {{"image", "reg/tf:1"}, {"gpus", 2}}}}},
      {"partial", "{{name}}-{{workers}}"},
      {"partials", "{{>partial}}"},
      {"json:workers", "literal"},
      {"a", "first"},
      {"json:a", "literal wins: json:a sorts after a"},
  };
  for (const std::string tmpl : {
           "name: {{name}}\nworkers: {{workers}}\n",
           "{{#enabled}}on{{/enabled}}{{^off}}not off{{/off}}{{#gpus}}gpus{{/gpus}}",
           "labels: {{json:labels}}\nargs: {{json:args}}\nnone: {{json:none}}|{{json:gpus}}",
           "env:\n{{#env}}\n- name: {{name}}\n  value: {{value}}\n{{/env}}\nafter\n",
           "{{#args}}[{{.}}]{{/args}}{{#nothing}}x{{/nothing}}{{^nothing}}none{{/nothing}}",
           "{{roles.worker.image}} {{#roles.worker}}{{image}} {{name}}{{/roles.worker}}",
           "{{roles.worker.json:gpus}} {{roles.missing.image}} {{labels.team}}",
           "  {{#enabled}}  \n  x\n  {{/enabled}}  \n",
           "{{! a comment }}{{{name}}}{{& name }}{{ name }}\r\n{{name}}\r{{name}}",
           "{{=<% %>=}}<% name %> {{name}} <%={{ }}=%>{{name}}",
           "{{>partial}} {{>missing}} {{>partials}}",
           "{{json:workers}} {{json:a}}",
           "{{#labels}}{{team}}{{/labels}}{{#name}}{{.}}{{/name}}",
           "x {{#off}}y{{/off}}\n{{#off}}{{/off}}\n",
       })
    expect_as_reference(tmpl, context);
}

TEST(MustacheTest, ErrorsAreKainjowsWords) {
  const json context = {{"a", 1}, {"bad", "{{#x}}"}};
  for (const std::string tmpl : {
           "{{a",
           "{{{a}}",
           "{{#a}}",
           "{{#a}}{{/b}}",
           "{{/a}}",
           "{{#a}}{{#b}}{{/b}}",
           "{{=<%>=}}",
           "{{= a b c =}}",
           "{{=a=b c=}}",
           "{{>bad}}",
           "{{#a}}{{>bad}}{{/a}}",
       })
    expect_as_reference(tmpl, context);
  EXPECT_EQ(ours("x\n{{#a}}", context).error, "Unclosed section \"a\" at 2");
  EXPECT_EQ(ours("{{>bad}}", context).error, "Unclosed section \"x\" at 1");
}

// A value that names itself as a partial: kainjow recursed until the stack overflowed.
TEST(MustacheTest, APartialThatRendersItselfIsAnErrorNotACrash) {
  const json context = {{"self", "{{>self}}"}};
  const Rendered got = ours("{{>self}}", context);
  EXPECT_EQ(got.error, "Partial \"self\" nested deeper than 16 at 1");
}

// Sections nested past any template's need are an error, not a crash (the parser, the renderer
// and the tree's destruction recurse per level; kainjow crashed or took minutes at 100,000).
TEST(MustacheTest, SectionsNestedTooDeepAreAnErrorNotACrash) {
  std::string deep;
  for (int i = 0; i < 100'000; ++i)
    deep += "{{#a}}";
  EXPECT_EQ(ours(deep, {{"a", true}}).error, "Sections nested deeper than 256 at 1536");
  std::string fits;
  for (int i = 0; i < 256; ++i)
    fits = "{{#a}}" + fits + "{{/a}}";
  EXPECT_EQ(ours(fits + "x", {{"a", true}}).text, "x");
  EXPECT_EQ(ours(fits + "x", {{"a", true}}).error, "");
}

// A property: random templates (text, line breaks, blanks, every kind of tag, dotted and json:
// names, sections nested right and wrong, set-delimiter tags good and bad, partials of values that
// are templates) over random contexts (nested objects, lists, every falsy value, names that clash
// with json: ones) render as kainjow renders them, with the same errors.
TEST(MustacheTest, PropertyRendersAsKainjowOnRandomTemplates) {
  std::mt19937 rng(20261127);
  const auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  const std::vector<std::string> names = {
      "a",      "b", "c",      "list",     "obj",        "obj.a", "obj.b",
      "list.a", ".", "json:a", "json:obj", "obj.json:b", "p",     "json:json:a",
      "a.",     "",  " a ",    "missing",  "z.a",        "..",    "json:list"};
  const auto scalar = [&]() -> json {
    switch (rng() % 9) {
      case 0:
        return nullptr;
      case 1:
        return false;
      case 2:
        return true;
      case 3:
        return 0;
      case 4:
        return "";
      case 5:
        return static_cast<int>(rng() % 100);
      case 6:
        return 2.5;
      case 7:
        return pick({"x", "{{a}}", "{{#a}}y{{/a}}", " ", "{{", "\"q\""});
      // No partial in a value: one reaching itself would overflow kainjow's stack.
      default:
        return pick({"{{b}}{{c}}", "{{=<% %>=}}<%a%>", "{{#b}}"});
    }
  };
  const auto value = [&](const auto& self, int depth) -> json {
    const unsigned kind = depth > 2 ? 0 : rng() % 4;
    if (kind == 0)
      return scalar();
    if (kind == 1) {
      json list = json::array();
      for (int i = 0, n = static_cast<int>(rng() % 4); i < n; ++i)
        list.push_back(self(self, depth + 1));
      return list;
    }
    json obj = json::object();
    for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i)
      obj[pick({"a", "b", "c", "list", "obj", "json:a", "json:b", "p", "z"})] =
          self(self, depth + 1);
    return obj;
  };
  const auto fragment = [&](const auto& self, int depth,
                            std::vector<std::string>& open) -> std::string {
    switch (rng() % 16) {
      case 0:
        return pick({"text", "a: ", "-", "{", "}", "{x}", "=", "#"});
      case 1:
        return pick({"\n", "\r\n", "\r"});
      case 2:
        return pick({" ", "  ", "\t"});
      case 3:
        return "{{" + pick(names) + "}}";
      case 4:
        return "{{{" + pick(names) + "}}}";
      case 5:
        return "{{&" + pick(names) + "}}";
      case 6:
        return "{{! " + pick({"note", "{{", "}"}) + " }}";
      case 7:
        return "{{>" + pick({"p", "a", "missing", "obj.a"}) + "}}";
      case 8:
        if (depth < 3) {
          const std::string name = pick(names);
          std::string inner;
          open.push_back(name);
          for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i)
            inner += self(self, depth + 1, open);
          open.pop_back();
          return "{{" + pick({"#", "^"}) + name + "}}" + inner +
                 (rng() % 20 == 0 ? "" : "{{/" + (rng() % 15 == 0 ? pick(names) : name) + "}}");
        }
        return "{{a}}";
      case 9:
        return rng() % 10 == 0 ? "{{/" + pick(names) + "}}" : "{{b}}";
      case 10:
        return pick({"{{=<% %>=}}", "{{=| |=}}", "<%={{ }}=%>", "|={{ }}=|", "{{= x =}}"});
      case 11:
        return pick({"<% a %>", "|b|", "<%#list%>i<%/list%>"});
      case 12:
        return rng() % 30 == 0 ? "{{" + pick(names) : "{{c}}";
      default:
        return pick({"x", "y: ", "{{a}}", "\n"});
    }
  };
  int errors = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::string> open;
    std::string tmpl;
    for (int f = 0, n = 1 + static_cast<int>(rng() % 10); f < n; ++f)
      tmpl += fragment(fragment, 0, open);
    json context = value(value, 1);
    if (!context.is_object())
      context = {{"a", context}};
    const Rendered want = reference(tmpl, context), got = ours(tmpl, context);
    errors += !want.error.empty();
    ASSERT_EQ(got.error, want.error)
        << "template: " << json(tmpl).dump() << "\ncontext: " << context.dump();
    ASSERT_EQ(got.text, want.text)
        << "template: " << json(tmpl).dump() << "\ncontext: " << context.dump();
  }
  EXPECT_GT(errors, 500);  // the errors were exercised too
}

}  // namespace
}  // namespace trainctl::render
