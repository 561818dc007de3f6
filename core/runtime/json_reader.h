// A small JSON reader: parses a document into a tree of JsonValue. Enough for the
// headers of checkpoint files and for tests that read what tally writes.
//
//   ASSIGN_OR_RETURN(JsonValue doc, ParseJson(R"({"shape": [2, 3]})"));
//   const JsonValue* shape = doc.Find("shape");     // null if absent
//   int64_t rows = shape->array[0].AsInt();
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tally {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  // Parsed with JsonArrays::kCompactNumbers, a non-empty array of numbers only is held
  // here (8 bytes an element), and `array` is empty.
  std::vector<double> numbers;
  std::map<std::string, JsonValue> object;

  const JsonValue* Find(const std::string& key) const;
  bool is_number() const { return kind == Kind::kNumber; }
  bool is_integer() const;  // a number with no fractional part
  int64_t AsInt() const { return int64_t(number); }
};

// Parses `text` (one JSON value, surrounded by optional whitespace). Errors name the
// byte offset: "[json] expected ':' at offset 17".
// kCompactNumbers keeps arrays of numbers in `numbers` (a report's 4,096 × 4,096 peer
// matrix in 134 MB instead of 2 GB of JsonValues).
enum class JsonArrays { kValues, kCompactNumbers };
absl::StatusOr<JsonValue> ParseJson(std::string_view text, JsonArrays arrays = JsonArrays::kValues);

}  // namespace tally
