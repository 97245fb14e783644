// The metadata section: JSON object text for humans (kiln inspect).
#include <nlohmann/json.hpp>

#include "artifact/artifact.h"

namespace kiln::artifact::detail {

std::string metadata_problem(const std::string& text) {
  if (text.empty()) return {};
  // accept() validates without building a document, so deeply nested input
  // costs neither memory nor stack.
  if (!nlohmann::json::accept(text)) return "not valid JSON";
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos || text[first] != '{') return "JSON, but not an object";
  return {};
}

}  // namespace kiln::artifact::detail
