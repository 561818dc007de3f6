#include "core/runtime/json_writer.h"

#include <cmath>

#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"

namespace tally {
namespace {

TEST(JsonWriter, NestsAndEscapes) {
  JsonWriter w;
  w.BeginObject();
  w.Key("op").String("all_reduce");
  w.Key("sizes").IntArray({8, 16});
  w.Key("nested").BeginArray().BeginObject().Key("x").Double(0.5).EndObject().Bool(true).EndArray();
  w.Key("text").String("a\"b\\c\n");
  w.Key("nan").Double(std::nan(""));
  w.EndObject();
  EXPECT_EQ(w.str(),
            R"({"op":"all_reduce","sizes":[8,16],"nested":[{"x":0.5},true],"text":"a\"b\\c\n","nan":null})");
}

// JSON text is UTF-8 both ways: the writer turns bytes that are not UTF-8 into U+FFFD, the
// reader refuses them, and a well-formed character passes through either way.
TEST(JsonWriter, WritesOnlyUtf8AndTheReaderReadsOnlyUtf8) {
  JsonWriter w;
  w.BeginArray().String("caf\xc3\xa9 \xff\xfe \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98\x80").EndArray();
  EXPECT_EQ(w.str(), "[\"caf\xc3\xa9 \\ufffd\\ufffd \\ufffd\\ufffd \\ufffd\\ufffd\\ufffd \xf0\x9f\x98\x80\"]");
  absl::StatusOr<JsonValue> back = ParseJson(w.str());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->array[0].string, "caf\xc3\xa9 \xef\xbf\xbd\xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd "
                                   "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd \xf0\x9f\x98\x80");
  EXPECT_EQ(ParseJson("\"\\ud83d\\ude00\"")->string, "\xf0\x9f\x98\x80");  // a surrogate pair
  for (const char* bad : {"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
                          "\"\xe2\x82\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"\\u12g4\"",
                          "\"a\nb\""}) {
    EXPECT_FALSE(ParseJson(bad).ok()) << bad;
  }
}

TEST(JsonReader, KeepsArraysOfNumbersCompactWhenAsked) {
  absl::StatusOr<JsonValue> doc = ParseJson(R"({"peers": [1, 2, 3], "mixed": [1, "a"], "empty": []})",
                                            JsonArrays::kCompactNumbers);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->Find("peers")->numbers, (std::vector<double>{1, 2, 3}));
  EXPECT_TRUE(doc->Find("peers")->array.empty());
  const JsonValue& mixed = *doc->Find("mixed");
  EXPECT_TRUE(mixed.numbers.empty());
  ASSERT_EQ(mixed.array.size(), 2u);
  EXPECT_EQ(mixed.array[0].number, 1);
  EXPECT_EQ(mixed.array[1].string, "a");
  EXPECT_EQ(ParseJson("[1, 2]")->array.size(), 2u);  // by default, values
}

}  // namespace
}  // namespace tally
