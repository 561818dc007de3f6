#include "core/runtime/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/files.h"
#include "core/runtime/json_reader.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/status_macros.h"

namespace tally {

namespace {

// The byte range [begin, end) of tensor `name` in the data (of `data_size` bytes) after
// checking its header entry: an F32 tensor whose shape's size is its range's, inside
// the data. The error says what is wrong.
absl::StatusOr<std::pair<uint64_t, uint64_t>> TensorRange(const std::string& name, const JsonValue& entry,
                                                          uint64_t data_size) {
  auto bad = [&](const std::string& why) { return absl::InvalidArgumentError(why); };
  if (entry.kind != JsonValue::Kind::kObject) return bad(absl::StrCat("tensor '", name, "' is not an object"));
  const JsonValue* dtype = entry.Find("dtype");
  const JsonValue* shape = entry.Find("shape");
  const JsonValue* offsets = entry.Find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr ||
      shape->kind != JsonValue::Kind::kArray || offsets->kind != JsonValue::Kind::kArray ||
      offsets->array.size() != 2) {
    return bad(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
  }
  if (dtype->kind != JsonValue::Kind::kString || dtype->string != "F32") {
    return bad(absl::StrCat("tensor '", name, "' has dtype ", dtype->string, "; tally reads F32"));
  }
  uint64_t count = 1;
  for (const JsonValue& d : shape->array) {
    if (!d.is_integer() || d.number < 0) return bad(absl::StrCat("tensor '", name, "' has a bad shape"));
    // No shape holds more values than the file has bytes (and the product cannot overflow).
    if (d.AsInt() > 0 && count > data_size / uint64_t(d.AsInt())) {
      return bad(absl::StrCat("tensor '", name, "' has a shape larger than the file"));
    }
    count *= uint64_t(d.AsInt());
  }
  const JsonValue& begin = offsets->array[0];
  const JsonValue& end = offsets->array[1];
  if (!begin.is_integer() || !end.is_integer() || begin.number < 0 || end.number < begin.number ||
      uint64_t(end.AsInt()) > data_size) {
    return bad(absl::StrCat("tensor '", name, "' has data_offsets outside the file (truncated?)"));
  }
  if (uint64_t(end.AsInt() - begin.AsInt()) != count * sizeof(float)) {
    return bad(absl::StrCat("tensor '", name, "' holds ", end.AsInt() - begin.AsInt(),
                            " bytes, its shape needs ", count * sizeof(float)));
  }
  return std::make_pair(uint64_t(begin.AsInt()), uint64_t(end.AsInt()));
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  JsonWriter header;
  header.BeginObject();
  header.Key("__metadata__").BeginObject();
  for (const auto& [key, value] : metadata) header.Key(key).String(value);
  header.EndObject();
  int64_t offset = 0;
  for (const SafetensorsEntry& t : tensors) {
    int64_t bytes = NumElements(t.shape) * int64_t(sizeof(float));
    header.Key(t.name).BeginObject();
    header.Key("dtype").String("F32");
    header.Key("shape").IntArray(std::vector<int64_t>(t.shape.begin(), t.shape.end()));
    header.Key("data_offsets").IntArray({offset, offset + bytes});
    header.EndObject();
    offset += bytes;
  }
  header.EndObject();
  std::string text = header.str();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned

  // Written beside the path and renamed over it, so a crash never leaves half a
  // checkpoint behind (core/runtime/files.h).
  ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path, "[checkpoint]"));
  uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  RETURN_IF_ERROR(out.Write(le, 8));
  RETURN_IF_ERROR(out.Write(text.data(), int64_t(text.size())));
  for (const SafetensorsEntry& t : tensors) {
    RETURN_IF_ERROR(out.Write(t.data, NumElements(t.shape) * int64_t(sizeof(float))));
  }
  return out.Commit();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, int64_t max_bytes) {
  ASSIGN_OR_RETURN(int64_t size, CheckInputFile(path, "[checkpoint]", max_bytes));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("[checkpoint] cannot open '", path, "'"));
  std::string bytes(size_t(size), '\0');
  in.read(bytes.data(), size);
  if (in.gcount() != size) return absl::DataLossError(absl::StrCat("[checkpoint] cannot read '", path, "'"));
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' is not a valid safetensors file: ", why));
  };
  if (bytes.size() < 8) return bad("shorter than its 8-byte header length");
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (length > bytes.size() - 8) {
    return bad(absl::StrCat("header of ", length, " bytes but only ", bytes.size() - 8, " follow (truncated?)"));
  }
  absl::StatusOr<JsonValue> header = ParseJson(std::string_view(bytes).substr(8, length));
  if (!header.ok()) return bad(std::string(header.status().message()));
  if (header->kind != JsonValue::Kind::kObject) return bad("the header is not a JSON object");
  const size_t data_start = 8 + length;
  const uint64_t data_size = bytes.size() - data_start;

  SafetensorsFile file;
  const JsonValue* metadata = header->Find("__metadata__");
  if (metadata == nullptr) return bad("the header has no __metadata__");
  if (metadata->kind != JsonValue::Kind::kObject) return bad("__metadata__ is not an object");
  for (const auto& [key, value] : metadata->object) {
    if (value.kind != JsonValue::Kind::kString) {
      return bad(absl::StrCat("__metadata__ '", key, "' is not a string"));
    }
    file.metadata[key] = value.string;
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) of every tensor
  for (const auto& [name, entry] : header->object) {
    if (name == "__metadata__") continue;
    absl::StatusOr<std::pair<uint64_t, uint64_t>> range = TensorRange(name, entry, data_size);
    if (!range.ok()) return bad(std::string(range.status().message()));
    ranges.push_back(*range);
    SafetensorsFile::Tensor t;
    for (const JsonValue& d : entry.Find("shape")->array) t.shape.push_back(d.AsInt());
    t.data.resize(size_t((range->second - range->first) / sizeof(float)));
    std::memcpy(t.data.data(), bytes.data() + data_start + range->first, t.data.size() * sizeof(float));
    file.tensors[name] = std::move(t);
  }
  // The packed sequence: sorted by offset, every range starts where the previous ended.
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin < at) return bad(absl::StrCat("tensor data overlaps at byte ", begin));
    if (begin > at) return bad(absl::StrCat("a gap in the tensor data at byte ", at));
    at = end;
  }
  if (at != data_size) {
    return bad(absl::StrCat(data_size - at, " trailing bytes after the tensor data"));
  }
  return file;
}

}  // namespace tally
