// Marker strings of the DeepSeek-V4 chat format (spec §5). The chat encoder writes them and the
// output parser looks for them, so both sides share one definition.
#pragma once

#include <string_view>

namespace dsv4::chat {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// DSML tool-call block. Open tags of invoke/parameter carry attributes, so only their fixed
// head is a constant; close tags are complete.
inline constexpr std::string_view kToolCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kToolCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeHead = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParamHead = "<｜DSML｜parameter";
inline constexpr std::string_view kParamClose = "</｜DSML｜parameter>";

}  // namespace dsv4::chat
