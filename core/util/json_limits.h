// Bounded JSON (docs/files.md): every JSON the project reads is parsed here, its nesting depth
// checked by a linear scan before the parser builds anything (deeply nested values make recursive
// operations on nlohmann::json, and its recursive destruction in older releases, overflow the stack).
// Sizes are capped where the text is read (read_file's max_bytes).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace mfsdp {

// Deeper than anything this project writes (a layout is about 6 levels deep).
constexpr int kMaxJsonDepth = 64;

// Throws naming `what` (the file or flag) and the byte offset when `text` nests arrays or objects
// deeper than `max_depth`.
void check_json_depth(const std::string& text, const std::string& what, int max_depth = kMaxJsonDepth);

// check_json_depth, then nlohmann::json::parse (whose parse_error a caller may catch as before).
nlohmann::json parse_json(const std::string& text, const std::string& what, int max_depth = kMaxJsonDepth);

}  // namespace mfsdp
