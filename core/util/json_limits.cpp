#include "core/util/json_limits.h"

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

namespace mfsdp {

void check_json_depth(const std::string& text, const std::string& what, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      TORCH_CHECK(++depth <= max_depth, what, ": JSON nested deeper than ", max_depth, " levels (at byte ", i,
                  "); refused before parsing");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& what, int max_depth) {
  check_json_depth(text, what, max_depth);
  return nlohmann::json::parse(text);
}

}  // namespace mfsdp
