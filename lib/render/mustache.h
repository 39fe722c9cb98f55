#pragma once

// Mustache templates as trainctl renders them: read and rendered exactly as kainjow/mustache
// 4.1 does (the engine trainctl used before this one; users' templates were written against it,
// and mustache_test.cc compares the two on random templates), over a JSON context read the way
// render.h describes, without building kainjow's copy of the context first: a value is spelled
// only when a tag names it.
//
// kainjow's reading, kept where it differs from the mustache spec:
//   - a line is dropped when a section was rendered on it and it holds only spaces and tabs
//     after rendering (render.cc removes the spec's standalone lines before, for the rest);
//   - a dotted name is looked up whole in each context from the innermost, not by its first
//     part; "\r" alone ends a line as "\n" and "\r\n" do;
//   - `{{>name}}` renders the string value `name` as a template in the current context;
//   - a set-delimiter tag applies to the tags after it; `{{{x}}}` only with "{{ }}";
//   - errors: "Unclosed tag at N", "Invalid set delimiter tag at N", "Unopened section \"s\" at
//     N", "Unclosed section \"s\" at N" (N: the tag's byte offset), and a partial's own error.
// Where it differs: sections nested deeper than 256 and partials deeper than 16 are errors (kainjow
// overflowed its stack, or took minutes, there).

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace trainctl::render {

/// Whether a member counts as false for `{{#key}}`: null, false, 0, "", [] and {}.
bool falsy(const nlohmann::json& v);

/// `v` as inline JSON with ", " and ": " separators (what `{{json:key}}` renders): valid YAML
/// flow syntax for every parser.
std::string flow(const nlohmann::json& v);

class Mustache {
 public:
  /// Parses `text`; error() says why it does not parse.
  explicit Mustache(std::string_view text);

  /// Empty when the template parsed (and rendered); else kainjow's message.
  const std::string& error() const { return error_; }

  /// The template rendered against `context` (a JSON object, read as render.h says: members
  /// YAML-spelled, `json:KEY` siblings). A partial that does not parse sets error() and ends the
  /// rendering. Nothing is escaped.
  std::string render(const nlohmann::json& context);

 private:
  struct Node {
    enum class Type { Text, Newline, Variable, Section, Inverted, SectionEnd, Partial, Other };
    Type type = Type::Text;
    std::string text;  // Text and Newline: the text; otherwise the tag's name
    std::size_t position = 0;
    std::vector<Node> children;  // a section's
  };
  class Renderer;

  void parse(std::string_view text);

  Node root_;
  std::string error_;
};

}  // namespace trainctl::render
