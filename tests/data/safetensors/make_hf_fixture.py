#!/usr/bin/env python3
"""Writes hf_reference.safetensors with the reference `safetensors` library (torch backend), so the
C++ reader is tested against a file it did not write. Run where torch + safetensors are installed:
    python3 tests/data/safetensors/make_hf_fixture.py OUT_DIR
Tensor values are simple closed forms that checkpoint_test.cpp recomputes."""
import sys

import torch
from safetensors.torch import save_file

out = sys.argv[1] if len(sys.argv) > 1 else "."
t = {
    "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5 - 1.0,
    "bf16": (torch.arange(5, dtype=torch.float32) * 0.25 - 0.5).to(torch.bfloat16),
    "f16": torch.tensor([1.0, -2.0, 0.5], dtype=torch.float16),
    "i64": torch.tensor([[0, 1, 2], [3, 4, 5]], dtype=torch.int64),
    "i32": torch.tensor([7, -1], dtype=torch.int32),
    "i8": torch.tensor([0x21, -0x10], dtype=torch.int8),  # packed e2m1: (1, 0.5), (0, -0)
    "u8": torch.tensor([1, 2, 3], dtype=torch.uint8),
    "scalar": torch.tensor(3.0, dtype=torch.float32),
    "empty": torch.zeros(0, 4, dtype=torch.float32),
    "fp8.weight": torch.tensor([[1.0, -2.0, 0.5], [448.0, 0.0, -0.125]]).to(torch.float8_e4m3fn),
    "fp8.scale": torch.tensor([[2.0]]).to(torch.float8_e8m0fnu),
    "mx.weight": torch.tensor([[0x21] + [0] * 15], dtype=torch.int8),
    "mx.scale": torch.tensor([[4.0]]).to(torch.float8_e8m0fnu),
}
save_file(t, f"{out}/hf_reference.safetensors", metadata={"format": "pt", "source": "make_hf_fixture.py"})
print(torch.__version__)
