// Bytes to carry values between processes of one build (the report gathers every rank's
// ledgers to rank 0): fixed-width integers and doubles as they lie in memory, strings
// with their length. Both ends are the same program on the same kind of machine.
//
//   ByteWriter w;
//   w.Int(42).Double(0.5).String("dp");
//   ByteReader r(w.bytes());
//   int64_t n = r.Int(); double x = r.Double(); std::string g = r.String();
//   if (!r.ok()) ...  // read past the end: every later read gives 0 / ""
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tally {

class ByteWriter {
 public:
  ByteWriter& Int(int64_t v) { return Raw(&v, sizeof v); }
  ByteWriter& Double(double v) { return Raw(&v, sizeof v); }
  ByteWriter& String(std::string_view s) {
    Int(int64_t(s.size()));
    return Raw(s.data(), s.size());
  }
  const std::string& bytes() const { return bytes_; }

 private:
  ByteWriter& Raw(const void* data, size_t n) {
    bytes_.append(static_cast<const char*>(data), n);
    return *this;
  }
  std::string bytes_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}

  int64_t Int() {
    int64_t v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  double Double() {
    double v = 0;
    Raw(&v, sizeof v);
    return v;
  }
  std::string String() {
    const int64_t n = Int();
    if (!ok_ || n < 0 || size_t(n) > bytes_.size() - at_) {
      ok_ = false;
      return "";
    }
    std::string s(bytes_.substr(at_, size_t(n)));
    at_ += size_t(n);
    return s;
  }
  // Every read so far was within the bytes.
  bool ok() const { return ok_; }
  bool done() const { return at_ == bytes_.size(); }

 private:
  void Raw(void* out, size_t n) {
    if (!ok_ || n > bytes_.size() - at_) {
      ok_ = false;
      return;
    }
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
  }
  std::string_view bytes_;
  size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace tally
