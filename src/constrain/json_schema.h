// JSON Schema compiled for constrained decoding (response_format json_schema / json_object).
//
// Supported keywords: type (a name or a list of names: object, array, string, number, integer,
// boolean, null), properties, required, additionalProperties (true, false or a schema), items,
// minItems, maxItems, enum, const, anyOf, oneOf (as anyOf: no exclusivity check), allOf with a single
// schema, $ref to local definitions ("#/$defs/NAME", "#/definitions/NAME", "#"), and annotations
// that do not constrain (title, description, default, examples, $comment, $schema, $id, strict).
// Any other keyword is an error that names it and where it is, so a request is refused (400)
// rather than half enforced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace dsv4::constrain {

struct SchemaNode {
    // booleans and null compile to kLiterals
    enum class Kind { kAny, kObject, kArray, kString, kNumber, kInteger, kLiterals, kAnyOf };
    Kind kind = Kind::kAny;
    // kObject: the declared properties in order; additional: node of undeclared keys (-1: none allowed).
    std::vector<std::string> prop_names;
    std::vector<int> prop_nodes;
    std::vector<bool> prop_required;
    int additional = -1;
    // kArray: node of every item (a kAny node when not given), item count bounds (max -1: none).
    int items = -1;
    int64_t min_items = 0, max_items = -1;
    // kLiterals: the allowed values as compact JSON texts (enum, const, true/false).
    std::vector<std::string> literals;
    // kAnyOf: the alternatives.
    std::vector<int> options;
};

struct CompiledSchema {
    std::vector<SchemaNode> nodes;
    int root = 0;
};

// Errors: kInvalidArgument naming the unsupported keyword or the malformed part and its JSON pointer.
Result<CompiledSchema> compile_json_schema(const nlohmann::json& schema);

// response_format {"type": "json_object"}: any JSON object.
CompiledSchema any_json_object();

}  // namespace dsv4::constrain
