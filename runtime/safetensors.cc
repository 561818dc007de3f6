#include "runtime/safetensors.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "runtime/json_reader.h"
#include "runtime/json_writer.h"
#include "runtime/status_macros.h"

namespace tally {

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

  // Write to a sibling file and rename, so a crash never leaves half a checkpoint behind.
  std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("[checkpoint] cannot write '", path, "'"));
  uint64_t length = text.size();
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(length >> (8 * i));
  out.write(reinterpret_cast<const char*>(le), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const SafetensorsEntry& t : tensors) {
    out.write(reinterpret_cast<const char*>(t.data),
              std::streamsize(NumElements(t.shape) * int64_t(sizeof(float))));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat("[checkpoint] failed writing '", path, "'"));
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat("[checkpoint] cannot move '", partial, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("[checkpoint] cannot open '", path, "'"));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  for (const auto& [name, entry] : header->object) {
    if (name == "__metadata__") {
      for (const auto& [key, value] : entry.object) file.metadata[key] = value.string;
      continue;
    }
    const JsonValue* dtype = entry.Find("dtype");
    const JsonValue* shape = entry.Find("shape");
    const JsonValue* offsets = entry.Find("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr || offsets->array.size() != 2) {
      return bad(absl::StrCat("tensor '", name, "' lacks dtype, shape or data_offsets"));
    }
    if (dtype->string != "F32") {
      return bad(absl::StrCat("tensor '", name, "' has dtype ", dtype->string, "; tally reads F32"));
    }
    SafetensorsFile::Tensor t;
    for (const JsonValue& d : shape->array) {
      if (!d.is_integer() || d.number < 0) return bad(absl::StrCat("tensor '", name, "' has a bad shape"));
      t.shape.push_back(d.AsInt());
    }
    const JsonValue& begin = offsets->array[0];
    const JsonValue& end = offsets->array[1];
    if (!begin.is_integer() || !end.is_integer() || begin.number < 0 || end.number < begin.number ||
        uint64_t(end.AsInt()) > data_size) {
      return bad(absl::StrCat("tensor '", name, "' has data_offsets outside the file (truncated?)"));
    }
    int64_t count = NumElements(t.shape);
    if (end.AsInt() - begin.AsInt() != count * int64_t(sizeof(float))) {
      return bad(absl::StrCat("tensor '", name, "' holds ", end.AsInt() - begin.AsInt(),
                              " bytes, its shape needs ", count * 4));
    }
    t.data.resize(size_t(count));
    std::memcpy(t.data.data(), bytes.data() + data_start + begin.AsInt(), size_t(count) * sizeof(float));
    file.tensors[name] = std::move(t);
  }
  return file;
}

}  // namespace tally
