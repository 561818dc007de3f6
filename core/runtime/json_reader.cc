#include "core/runtime/json_reader.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "core/runtime/utf8.h"

namespace tally {

const JsonValue* JsonValue::Find(const std::string& key) const {
  auto it = object.find(key);
  return it == object.end() ? nullptr : &it->second;
}

bool JsonValue::is_integer() const {
  return kind == Kind::kNumber && std::floor(number) == number && std::abs(number) < 9.0e15;
}

namespace {

class Parser {
 public:
  Parser(std::string_view text, JsonArrays arrays) : text_(text), compact_(arrays == JsonArrays::kCompactNumbers) {}

  absl::StatusOr<JsonValue> Document() {
    JsonValue v;
    if (absl::Status s = Value(v, 0); !s.ok()) return s;
    SkipSpace();
    if (pos_ != text_.size()) return Error("trailing characters");
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("[json] ", what, " at offset ", pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  absl::Status Value(JsonValue& v, int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    char c = text_[pos_];
    if (c == '{') return Object(v, depth);
    if (c == '[') return Array(v, depth);
    if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      return String(v.string);
    }
    if (Literal("true") || Literal("false")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = c == 't';
      return absl::OkStatus();
    }
    if (Literal("null")) return absl::OkStatus();
    return Number(v);
  }

  absl::Status Object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kObject;
    ++pos_;  // '{'
    if (Consume('}')) return absl::OkStatus();
    do {
      SkipSpace();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"') return Error("expected a key");
      if (absl::Status s = String(key); !s.ok()) return s;
      if (!Consume(':')) return Error("expected ':'");
      if (v.object.count(key) > 0) return Error(absl::StrCat("duplicate key '", key, "'"));
      if (absl::Status s = Value(v.object[key], depth + 1); !s.ok()) return s;
    } while (Consume(','));
    if (!Consume('}')) return Error("expected ',' or '}'");
    return absl::OkStatus();
  }

  absl::Status Array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::kArray;
    ++pos_;  // '['
    if (Consume(']')) return absl::OkStatus();
    do {
      if (!compact_) {
        v.array.emplace_back();
        if (absl::Status s = Value(v.array.back(), depth + 1); !s.ok()) return s;
        continue;
      }
      JsonValue e;
      if (absl::Status s = Value(e, depth + 1); !s.ok()) return s;
      if (e.is_number() && v.array.empty()) {
        v.numbers.push_back(e.number);
        continue;
      }
      for (double x : v.numbers) {  // not numbers only: back to values
        v.array.emplace_back();
        v.array.back().kind = JsonValue::Kind::kNumber;
        v.array.back().number = x;
      }
      v.numbers.clear();
      v.array.push_back(std::move(e));
    } while (Consume(','));
    if (!Consume(']')) return Error("expected ',' or ']'");
    return absl::OkStatus();
  }

  // A string's text is UTF-8 and stays so: raw bytes must be well-formed UTF-8 and a
  // \u escape a scalar value (a surrogate only as the first of a pair), or the document
  // is refused; nothing that is not UTF-8 ever passes through.
  absl::Status String(std::string& out) {
    ++pos_;  // '"'
    while (pos_ < text_.size()) {
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) return Error("a control character in a string");
      if (c >= 0x80) {
        const size_t n = Utf8Length(text_.substr(pos_));
        if (n == 0) return Error("invalid UTF-8 in a string");
        out.append(text_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (pos_ >= text_.size()) break;
      char e = text_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          uint32_t code = 0;
          if (!Hex4(code)) return Error("a \\u escape needs four hex digits");
          if (code >= 0xDC00 && code <= 0xDFFF) return Error("a lone low surrogate in a \\u escape");
          if (code >= 0xD800 && code <= 0xDBFF) {
            uint32_t low = 0;
            if (!Literal("\\u") || !Hex4(low) || low < 0xDC00 || low > 0xDFFF) {
              return Error("a high surrogate without its low surrogate in a \\u escape");
            }
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(code, out);
          break;
        }
        default: return Error("bad escape");
      }
    }
    return Error("unterminated string");
  }

  bool Hex4(uint32_t& code) {
    if (pos_ + 4 > text_.size()) return false;
    code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_ + i];
      const int digit = h >= '0' && h <= '9' ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
      if (digit < 0) return false;
      code = code * 16 + uint32_t(digit);
    }
    pos_ += 4;
    return true;
  }

  absl::Status Number(JsonValue& v) {
    size_t start = pos_;
    while (pos_ < text_.size() && (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
                                   text_[pos_] == '-' || text_[pos_] == '+' || text_[pos_] == '.' ||
                                   text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
    }
    if (start == pos_) return Error("unexpected character");
    std::string digits(text_.substr(start, pos_ - start));
    char* end = nullptr;
    v.number = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str() + digits.size()) {
      pos_ = start;
      return Error("bad number");
    }
    v.kind = JsonValue::Kind::kNumber;
    return absl::OkStatus();
  }

  std::string_view text_;
  bool compact_ = false;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<JsonValue> ParseJson(std::string_view text, JsonArrays arrays) {
  return Parser(text, arrays).Document();
}

}  // namespace tally
