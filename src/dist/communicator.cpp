#include "dist/communicator.h"

namespace dsv4::dist {

size_t comm_dtype_bytes(CommDtype t) {
    switch (t) {
        case CommDtype::kF32:
            return 4;
        case CommDtype::kBf16:
            return 2;
        case CommDtype::kI32:
            return 4;
        case CommDtype::kI64:
            return 8;
        case CommDtype::kU8:
            return 1;
    }
    return 0;
}

const char* comm_dtype_name(CommDtype t) {
    switch (t) {
        case CommDtype::kF32:
            return "f32";
        case CommDtype::kBf16:
            return "bf16";
        case CommDtype::kI32:
            return "i32";
        case CommDtype::kI64:
            return "i64";
        case CommDtype::kU8:
            return "u8";
    }
    return "?";
}

}  // namespace dsv4::dist
