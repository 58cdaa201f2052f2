// Splits DeepSeek-V4 generated text into reasoning, content and DSML tool calls, either all at
// once or incrementally while tokens stream in. The incremental parser decides nothing until
// the text seen so far settles it (a possible marker prefix at the end is held back), so its
// deltas add up to the all-at-once result for every chunking of the same text (B21, B22).
//
// Format (spec §5): in thinking mode the prompt ends with "<think>", so the output is
// "reasoning</think>content"; content may end in a block
//   \n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="f">\n
//   <｜DSML｜parameter name="k" string="true|false">value</｜DSML｜parameter>\n ...
//   </｜DSML｜invoke>\n</｜DSML｜tool_calls>
// string="true" values are raw text, string="false" values are JSON. Arguments come out as a
// JSON object text {"k": value, ...} (Python json.dumps spacing, like the reference parser); a
// string="false" value that is not valid JSON is passed as a JSON string instead. Malformed
// DSML degrades to plain content: the raw text from the point where the block stops making
// sense is put back into content, nothing is dropped. The text must not contain the EOS marker
// (stop at EOS before parsing).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4 {

struct ToolCall {
    std::string name;
    std::string arguments_json;
};

struct ParsedOutput {
    std::string reasoning;
    std::string content;
    std::vector<ToolCall> tool_calls;
};

// `thinking`: the prompt ended with "<think>", so output starts inside the reasoning.
ParsedOutput parse_output(std::string_view text, bool thinking);

struct OutputDelta {
    std::string reasoning;
    std::string content;
    // Tool-call events in order. The first event of a call carries its name (and no argument
    // text); later ones carry argument JSON text that concatenates to the full arguments.
    struct ToolEvent {
        int index = 0;
        std::string name;
        std::string arguments_delta;
    };
    std::vector<ToolEvent> tool_events;

    bool empty() const { return reasoning.empty() && content.empty() && tool_events.empty(); }
};

class StreamingOutputParser {
public:
    explicit StreamingOutputParser(bool thinking);
    ~StreamingOutputParser();
    StreamingOutputParser(StreamingOutputParser&&) noexcept;
    StreamingOutputParser& operator=(StreamingOutputParser&&) noexcept;

    // Feeds the next piece of generated text; returns what it settles.
    OutputDelta push(std::string_view text);
    // End of generation: flushes what was held back and closes an unfinished tool call.
    OutputDelta finish();

private:
    struct State;
    std::unique_ptr<State> st_;
};

// Adds `d` to `out` (what parse_output does with every delta).
void apply_delta(ParsedOutput& out, const OutputDelta& d);

}  // namespace dsv4
