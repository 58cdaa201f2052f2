// JSON Schema compiler for constrained decoding (see json_schema.h).
#include "constrain/json_schema.h"

#include <map>
#include <set>

namespace dsv4::constrain {
namespace {

using json = nlohmann::json;
using Kind = SchemaNode::Kind;

const std::set<std::string>& annotations() {
    static const std::set<std::string> k = {"title",   "description", "default", "examples", "$comment",
                                            "$schema", "$id",         "strict",  "$defs",    "definitions"};
    return k;
}

class Compiler {
public:
    explicit Compiler(const json& root) : root_(root) {}

    Result<CompiledSchema> run() {
        DSV4_ASSIGN_OR_RETURN(out_.root, compile(root_, "#"));
        return std::move(out_);
    }

private:
    int add(SchemaNode n) {
        out_.nodes.push_back(std::move(n));
        return int(out_.nodes.size()) - 1;
    }
    int any() {
        if (any_ < 0) any_ = add(SchemaNode{});
        return any_;
    }
    static Status unsupported(const std::string& what, const std::string& where) {
        return invalid_argument("JSON schema: {} at {} is not supported by constrained decoding", what, where);
    }

    Result<const json*> resolve(const std::string& ref, const std::string& where) {
        if (ref == "#") return &root_;
        for (const char* base : {"#/$defs/", "#/definitions/"}) {
            const std::string b = base;
            if (ref.rfind(b, 0) != 0) continue;
            const std::string name = ref.substr(b.size());
            const auto defs = root_.find(b.substr(2, b.size() - 3));
            if (defs == root_.end() || !defs->is_object() || !defs->contains(name))
                return invalid_argument("JSON schema: $ref '{}' at {} names no definition", ref, where);
            return &defs->at(name);
        }
        return unsupported("$ref '" + ref + "' (only local #/$defs/NAME, #/definitions/NAME and #)", where);
    }

    Result<int> literals(const json& values, const std::string& where) {
        SchemaNode n;
        n.kind = Kind::kLiterals;
        for (const auto& v : values) n.literals.push_back(v.dump());
        if (n.literals.empty()) return invalid_argument("JSON schema: an empty enum at {}", where);
        return add(std::move(n));
    }

    Result<int> object(const json& s, const std::string& where) {
        SchemaNode n;
        n.kind = Kind::kObject;
        if (s.contains("properties")) {
            const json& props = s.at("properties");
            if (!props.is_object()) return invalid_argument("JSON schema: 'properties' at {} must be an object", where);
            if (props.size() > 64) return unsupported("more than 64 properties", where);
            for (auto it = props.begin(); it != props.end(); ++it) {
                for (unsigned char c : it.key())
                    if (c < 0x20 || c == '"' || c == '\\')
                        return unsupported("property name '" + it.key() + "'", where);
                n.prop_names.push_back(it.key());
                n.prop_nodes.push_back(-1);
                n.prop_required.push_back(false);
            }
        }
        if (s.contains("required")) {
            const json& req = s.at("required");
            if (!req.is_array()) return invalid_argument("JSON schema: 'required' at {} must be an array", where);
            for (const auto& r : req) {
                if (!r.is_string()) return invalid_argument("JSON schema: 'required' at {} must hold strings", where);
                bool found = false;
                for (size_t i = 0; i < n.prop_names.size(); ++i)
                    if (n.prop_names[i] == r.get<std::string>()) n.prop_required[i] = true, found = true;
                if (!found)
                    return unsupported("required property '" + r.get<std::string>() + "' not in properties", where);
            }
        }
        const int idx = add(std::move(n));
        if (s.contains("properties")) {
            size_t i = 0;
            for (auto it = s.at("properties").begin(); it != s.at("properties").end(); ++it, ++i) {
                DSV4_ASSIGN_OR_RETURN(int p, compile(it.value(), where + "/properties/" + it.key()));
                out_.nodes[size_t(idx)].prop_nodes[i] = p;
            }
        }
        int additional = any();
        if (s.contains("additionalProperties")) {
            const json& a = s.at("additionalProperties");
            if (a.is_boolean()) {
                additional = a.get<bool>() ? any() : -1;
            } else {
                DSV4_ASSIGN_OR_RETURN(additional, compile(a, where + "/additionalProperties"));
            }
        }
        out_.nodes[size_t(idx)].additional = additional;
        return idx;
    }

    Result<int> array(const json& s, const std::string& where) {
        SchemaNode n;
        n.kind = Kind::kArray;
        auto bound = [&](const char* key, int64_t& v) -> Status {
            if (!s.contains(key)) return Status::ok();
            if (!s.at(key).is_number_integer() || s.at(key).get<int64_t>() < 0)
                return invalid_argument("JSON schema: '{}' at {} must be a count", key, where);
            v = s.at(key).get<int64_t>();
            return Status::ok();
        };
        DSV4_RETURN_IF_ERROR(bound("minItems", n.min_items));
        DSV4_RETURN_IF_ERROR(bound("maxItems", n.max_items));
        if (n.max_items >= 0 && n.max_items < n.min_items)
            return invalid_argument("JSON schema: maxItems < minItems at {}", where);
        const int idx = add(std::move(n));
        int items = any();
        if (s.contains("items")) {
            if (s.at("items").is_array()) return unsupported("'items' as an array (tuple form)", where);
            DSV4_ASSIGN_OR_RETURN(items, compile(s.at("items"), where + "/items"));
        }
        out_.nodes[size_t(idx)].items = items;
        return idx;
    }

    Result<int> typed(const std::string& type, const json& s, const std::string& where) {
        if (type == "object") return object(s, where);
        if (type == "array") return array(s, where);
        SchemaNode n;
        if (type == "string")
            n.kind = Kind::kString;
        else if (type == "number")
            n.kind = Kind::kNumber;
        else if (type == "integer")
            n.kind = Kind::kInteger;
        else if (type == "boolean")
            return literals(json::array({true, false}), where);
        else if (type == "null")
            return literals(json::array({nullptr}), where);
        else
            return invalid_argument("JSON schema: unknown type '{}' at {}", type, where);
        return add(std::move(n));
    }

    Result<int> compile(const json& s, const std::string& where) {
        if (s.is_boolean()) {
            if (s.get<bool>()) return any();
            return unsupported("the schema 'false'", where);
        }
        if (!s.is_object()) return invalid_argument("JSON schema: expected an object at {}", where);
        static const std::set<std::string> known = {"type",  "properties", "required", "additionalProperties",
                                                    "items", "minItems",   "maxItems", "enum",
                                                    "const", "anyOf",      "oneOf",    "allOf",
                                                    "$ref"};
        for (auto it = s.begin(); it != s.end(); ++it)
            if (!known.count(it.key()) && !annotations().count(it.key()))
                return unsupported("the keyword '" + it.key() + "'", where);
        if (s.contains("$ref")) {
            for (auto it = s.begin(); it != s.end(); ++it)
                if (it.key() != "$ref" && !annotations().count(it.key()))
                    return unsupported("'$ref' beside '" + it.key() + "'", where);
            if (!s.at("$ref").is_string()) return invalid_argument("JSON schema: '$ref' at {} must be a string", where);
            const std::string ref = s.at("$ref").get<std::string>();
            if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
            DSV4_ASSIGN_OR_RETURN(const json* target, resolve(ref, where));
            const int idx = add(SchemaNode{});  // placeholder: recursive references point here
            refs_[ref] = idx;
            DSV4_ASSIGN_OR_RETURN(int body, compile(*target, ref));
            out_.nodes[size_t(idx)] = out_.nodes[size_t(body)];
            return idx;
        }
        if (s.contains("const")) return literals(json::array({s.at("const")}), where);
        if (s.contains("enum")) {
            if (!s.at("enum").is_array()) return invalid_argument("JSON schema: 'enum' at {} must be an array", where);
            return literals(s.at("enum"), where);
        }
        for (const char* comb : {"anyOf", "oneOf", "allOf"}) {
            if (!s.contains(comb)) continue;
            const json& alts = s.at(comb);
            if (!alts.is_array() || alts.empty())
                return invalid_argument("JSON schema: '{}' at {} must be a non-empty array", comb, where);
            for (const char* other : {"type", "properties", "items", "anyOf", "oneOf", "allOf"})
                if (std::string(other) != comb && s.contains(other))
                    return unsupported(std::string("'") + comb + "' beside '" + other + "'", where);
            if (std::string(comb) == "allOf") {
                if (alts.size() != 1) return unsupported("'allOf' with more than one schema", where);
                return compile(alts[0], where + "/allOf/0");
            }
            SchemaNode n;
            n.kind = Kind::kAnyOf;
            const int idx = add(std::move(n));
            for (size_t i = 0; i < alts.size(); ++i) {
                DSV4_ASSIGN_OR_RETURN(int o, compile(alts[i], where + "/" + comb + "/" + std::to_string(i)));
                out_.nodes[size_t(idx)].options.push_back(o);
            }
            return idx;
        }
        if (s.contains("type")) {
            const json& t = s.at("type");
            if (t.is_string()) return typed(t.get<std::string>(), s, where);
            if (!t.is_array() || t.empty())
                return invalid_argument("JSON schema: 'type' at {} must be a name or a list", where);
            SchemaNode n;
            n.kind = Kind::kAnyOf;
            const int idx = add(std::move(n));
            for (const auto& one : t) {
                if (!one.is_string()) return invalid_argument("JSON schema: 'type' at {} must hold names", where);
                DSV4_ASSIGN_OR_RETURN(int o, typed(one.get<std::string>(), s, where));
                out_.nodes[size_t(idx)].options.push_back(o);
            }
            return idx;
        }
        if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties"))
            return object(s, where);
        if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return array(s, where);
        return any();
    }

    const json& root_;
    CompiledSchema out_;
    std::map<std::string, int> refs_;
    int any_ = -1;
};

}  // namespace

Result<CompiledSchema> compile_json_schema(const nlohmann::json& schema) { return Compiler(schema).run(); }

CompiledSchema any_json_object() {
    CompiledSchema s;
    s.nodes.push_back(SchemaNode{});  // 0: any value
    SchemaNode obj;
    obj.kind = SchemaNode::Kind::kObject;
    obj.additional = 0;
    s.nodes.push_back(obj);
    s.root = 1;
    return s;
}

}  // namespace dsv4::constrain
