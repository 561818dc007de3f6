#include "runtime/json_writer.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace tally
