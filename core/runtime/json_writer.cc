#include "core/runtime/json_writer.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/files.h"
#include "core/runtime/utf8.h"

namespace tally {

void JsonWriter::BeforeValue() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

JsonWriter& JsonWriter::BeginObject() {
  BeforeValue();
  out_ += '{';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndObject() {
  out_ += '}';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::BeginArray() {
  BeforeValue();
  out_ += '[';
  first_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::EndArray() {
  out_ += ']';
  first_.pop_back();
  return *this;
}

JsonWriter& JsonWriter::Key(std::string_view key) {
  String(key);
  out_ += ':';
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::String(std::string_view value) {
  BeforeValue();
  out_ += '"';
  // Bytes that are not UTF-8 (a path's, say) are written as U+FFFD: the JSON is UTF-8.
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c >= 0x80) {
      const size_t n = Utf8Length(value.substr(i));
      if (n == 0) {
        out_ += "\\ufffd";
      } else {
        out_.append(value.substr(i, n));
        i += n - 1;
      }
      continue;
    }
    switch (c) {
      case '"': out_ += "\\\""; break;
      case '\\': out_ += "\\\\"; break;
      case '\n': out_ += "\\n"; break;
      case '\t': out_ += "\\t"; break;
      case '\r': out_ += "\\r"; break;
      default:
        if (c < 0x20) {
          out_ += absl::StrFormat("\\u%04x", c);
        } else {
          out_ += char(c);
        }
    }
  }
  out_ += '"';
  return *this;
}

JsonWriter& JsonWriter::Int(int64_t value) {
  BeforeValue();
  absl::StrAppend(&out_, value);
  return *this;
}

JsonWriter& JsonWriter::Double(double value) {
  BeforeValue();
  if (std::isfinite(value) && value == std::trunc(value) && std::abs(value) < 0x1p53) {
    out_ += absl::StrFormat("%.0f", value);  // a whole number, exactly (bytes)
  } else if (std::isfinite(value)) {
    out_ += absl::StrFormat("%.9g", value);
  } else {
    out_ += "null";
  }
  return *this;
}

JsonWriter& JsonWriter::Bool(bool value) {
  BeforeValue();
  out_ += value ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::IntArray(const std::vector<int64_t>& values) {
  BeginArray();
  for (int64_t v : values) Int(v);
  return EndArray();
}

absl::Status WriteTextFile(const std::string& path, std::string_view text) {
  return WriteFileAtomically(path, text, "[write]");
}

}  // namespace tally
