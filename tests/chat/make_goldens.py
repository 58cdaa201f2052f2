#!/usr/bin/env python3
"""Regenerates the chat-format goldens in tests/chat/data from the official DeepSeek-V4 encoder.

The official encoder (encoding/encoding_dsv4.py of the model repo) is not part of this project;
pass the folder that holds it. For each data/cases/NAME.json this writes NAME.prompt.txt (the
prompt text) and NAME.ids.json (its token ids from the reference tokenizer, npm tokenizers@0.23.2
installed by tools/npm).

A case is {"messages": [...], and optional "thinking", "reasoning_effort", "tools",
"response_format", "add_generation_prompt", "drop_thinking"}; they are applied the way
OpenAI-compatible servers drive the encoder: request tools (and response_format) join a leading
system or developer message (rendered after its content), else a new leading system message;
"reasoning_content" is the encoder's "reasoning"; efforts other than max/high are None.

usage: make_goldens.py ENCODER_DIR [TOKENIZER_JSON]
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def to_encoder_messages(case):
    msgs = []
    for m in case["messages"]:
        m = dict(m)
        if "reasoning_content" in m:
            m["reasoning"] = m.pop("reasoning_content")
        # OpenAI text parts reach the encoder already flattened with "\n" (tool results excepted).
        if m.get("role") != "tool" and isinstance(m.get("content"), list):
            m["content"] = "\n".join(p["text"] for p in m["content"])
        if m.get("role") in ("user", "tool") and m.get("content") is None:
            m["content"] = ""
        msgs.append(m)
    # Request-level tools (and response_format) join a leading system or developer message,
    # after its content, replacing tools it carried itself; without one, a system message
    # carrying only them is inserted. This is how vLLM's DeepSeek-V4 adapter places request tools.
    extra = {}
    if case.get("tools"):
        extra["tools"] = case["tools"]
    if case.get("response_format"):
        extra["response_format"] = case["response_format"]
    if extra:
        if msgs and msgs[0].get("role") in ("system", "developer"):
            msgs[0].update(extra)
        else:
            msgs.insert(0, dict(role="system", **extra))
    return msgs


def render(enc, case):
    effort = case.get("reasoning_effort")
    prompt = enc.encode_messages(
        to_encoder_messages(case),
        thinking_mode="thinking" if case.get("thinking") else "chat",
        drop_thinking=case.get("drop_thinking", True),
        reasoning_effort=effort if effort in ("max", "high") else None,
    )
    if not case.get("add_generation_prompt", True):
        last = case["messages"][-1]
        if last["role"] in ("user", "developer", "tool") and last.get("task") is None:
            for tail in (enc.ASSISTANT_SP_TOKEN + enc.thinking_start_token,
                         enc.ASSISTANT_SP_TOKEN + enc.thinking_end_token):
                if prompt.endswith(tail):
                    prompt = prompt[: -len(tail)]
                    break
    return prompt


def main():
    sys.path.insert(0, sys.argv[1])
    import encoding_dsv4 as enc  # noqa: E402
    tok = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "..", "shared", "data", "tokenizer", "tokenizer.json")
    cases_dir = os.path.join(HERE, "data", "cases")
    names = sorted(f[:-5] for f in os.listdir(cases_dir) if f.endswith(".json"))
    prompts = []
    for name in names:
        with open(os.path.join(cases_dir, name + ".json"), encoding="utf-8") as f:
            case = json.load(f)
        prompt = render(enc, case)
        prompts.append(prompt)
        with open(os.path.join(HERE, "data", name + ".prompt.txt"), "w", encoding="utf-8", newline="") as f:
            f.write(prompt)
    ids = subprocess.run(["node", os.path.join(HERE, "ref_ids.js"), tok],
                         input="\n".join(json.dumps(p) for p in prompts) + "\n",
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(ids) == len(names)
    for name, line in zip(names, ids):
        with open(os.path.join(HERE, "data", name + ".ids.json"), "w") as f:
            f.write(line + "\n")
    print(f"wrote {len(names)} goldens")


if __name__ == "__main__":
    main()
