// What the reply-parser tests check of every stream: deltas that add up to the whole parse, with tool-call
// pieces as OpenAI clients rely on them.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "server/chat_delta.h"

namespace drift::server {

// Adds a streamed delta to `out`: a call's first piece names it and calls start in order; later pieces
// extend a call already started; no piece is empty (it would make an empty chunk).
inline void add_checked_delta(const ChatDelta& d, ParsedChat& out) {
  for (const ToolCallDelta& piece : d.tool_calls) {
    EXPECT_TRUE(!piece.name.empty() || !piece.arguments.empty()) << "an empty piece at index " << piece.index;
    if (!piece.name.empty()) EXPECT_EQ(piece.index, int32_t(out.tool_calls.size())) << "calls start in order";
    if (piece.name.empty()) EXPECT_LT(piece.index, int32_t(out.tool_calls.size())) << "a piece of an unstarted call";
    accumulate({.tool_calls = {piece}}, out);
  }
  accumulate({.reasoning = d.reasoning, .content = d.content}, out);
}

inline void expect_same(const ParsedChat& got, const ParsedChat& want, const std::string& where) {
  EXPECT_EQ(got.reasoning, want.reasoning) << where;
  EXPECT_EQ(got.content, want.content) << where;
  ASSERT_EQ(got.tool_calls.size(), want.tool_calls.size()) << where;
  for (size_t i = 0; i < want.tool_calls.size(); ++i) {
    EXPECT_EQ(got.tool_calls[i].name, want.tool_calls[i].name) << where;
    EXPECT_EQ(got.tool_calls[i].arguments, want.tool_calls[i].arguments) << where;
  }
}

}  // namespace drift::server
