// The official DeepSeek-V4-Flash config.json (spec §1.1) as a built-in, so `dsv4 plan` and the
// tests can size the real model without the 160 GB checkpoint.
#pragma once

#include "model/config.h"

namespace dsv4::dist {

// The Flash config.json text (43 layers, 256 experts of 2048, 64 heads of 512, MXFP4 experts).
const char* flash_config_json();
// Parsed; never fails for the built-in text (DSV4_CHECK).
ModelConfig flash_model_config();

}  // namespace dsv4::dist
