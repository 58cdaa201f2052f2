// Checkpoint / safetensors reader: writer round trips, every malformed-file case (error names file and
// tensor, never a crash), sharded and directory layouts, dtype loading (B07) and tid2eid (B11).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test, removed afterwards.
class TempDir {
public:
    TempDir() {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        path_ = fs::temp_directory_path() /
                fmt::format("dsv4_ckpt_{}_{}_{}", ::getpid(), info->test_suite_name(), info->name());
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    ~TempDir() { fs::remove_all(path_); }
    std::string file(const std::string& name) const { return (path_ / name).string(); }
    std::string str() const { return path_.string(); }

private:
    fs::path path_;
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

// A raw safetensors file: length field (or an override), the header text, `data_size` data bytes.
std::vector<uint8_t> raw_file(const std::string& header, size_t data_size, std::optional<uint64_t> len = {}) {
    std::vector<uint8_t> out(8);
    const uint64_t n = len.value_or(header.size());
    for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(n >> (8 * i));
    out.insert(out.end(), header.begin(), header.end());
    for (size_t i = 0; i < data_size; ++i) out.push_back(uint8_t(i * 7 + 1));
    return out;
}

template <typename T>
std::span<const uint8_t> as_u8(const std::vector<T>& v) {
    return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

TEST(Safetensors, WriterReaderRoundTrip) {
    TempDir dir;
    SafetensorsWriter w;
    const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 1e-30f, -0.0f, 7.0f};
    const std::vector<int64_t> i64 = {0, 1, -5, int64_t(1) << 40};
    const std::vector<uint8_t> u8 = {1, 2, 3};
    const std::vector<uint16_t> f16 = {0x3c00, 0xc000};  // 1, -2
    ASSERT_TRUE(w.add_f32("b.f32", {2, 3}, f32).is_ok());
    ASSERT_TRUE(w.add_i64("a.i64", {4}, i64).is_ok());
    ASSERT_TRUE(w.add("c.u8", DType::kU8, {3}, u8).is_ok());
    ASSERT_TRUE(w.add("d.f16", DType::kF16, {2}, as_u8(f16)).is_ok());
    ASSERT_TRUE(w.add("e.empty", DType::kF32, {0, 4}, {}).is_ok());
    ASSERT_TRUE(w.add_bf16("f.bf16", {6}, f32).is_ok());
    w.set_metadata("format", "pt");
    EXPECT_FALSE(w.add_f32("b.f32", {6}, f32).is_ok());  // duplicate
    EXPECT_FALSE(w.add_f32("bad", {5}, f32).is_ok());    // size mismatch
    const std::string path = dir.file("m.safetensors");
    ASSERT_TRUE(w.write(path).is_ok());

    auto ck = Checkpoint::open(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->names(), (std::vector<std::string>{"a.i64", "b.f32", "c.u8", "d.f16", "e.empty", "f.bf16"}));
    EXPECT_EQ(ck->metadata().at("format"), "pt");
    EXPECT_EQ(ck->path(), path);
    auto t = ck->get("b.f32");
    ASSERT_TRUE(t.is_ok());
    EXPECT_EQ(t->dtype, DType::kF32);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t->numel(), 6);
    EXPECT_EQ(t->file, path);
    ASSERT_EQ(t->nbytes, 24u);
    EXPECT_EQ(std::memcmp(t->data, f32.data(), 24), 0);
    for (const auto& name : ck->names()) {
        auto v = ck->get(name);
        ASSERT_TRUE(v.is_ok());
        // The writer's layout keeps every tensor aligned to its element size.
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v->data) % dtype_size(v->dtype), 0u) << name;
    }
    EXPECT_EQ(std::memcmp(ck->get("a.i64")->data, i64.data(), 32), 0);
    EXPECT_EQ(std::memcmp(ck->get("c.u8")->data, u8.data(), 3), 0);
    EXPECT_EQ(ck->get("e.empty")->nbytes, 0u);

    const int64_t shape[] = {2, 3};
    EXPECT_TRUE(ck->get("b.f32", DType::kF32, shape).is_ok());
    const int64_t wrong[] = {3, 2};
    auto bad = ck->get("b.f32", DType::kF32, wrong);
    ASSERT_FALSE(bad.is_ok());
    const std::string& m = bad.status().message();
    EXPECT_TRUE(contains(m, path) && contains(m, "b.f32") && contains(m, "[3, 2]") && contains(m, "[2, 3]")) << m;
    auto bad_dtype = ck->get("b.f32", DType::kBF16, shape);
    ASSERT_FALSE(bad_dtype.is_ok());
    EXPECT_TRUE(contains(bad_dtype.status().message(), "BF16")) << bad_dtype.status().message();

    auto missing = ck->get("nope.weight");
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
    EXPECT_TRUE(contains(missing.status().message(), "nope.weight") && contains(missing.status().message(), path));
    EXPECT_FALSE(ck->has("nope.weight"));
    EXPECT_TRUE(ck->has("c.u8"));

    // Views survive moving the checkpoint (the mapping does not move).
    const uint8_t* before = ck->get("c.u8")->data;
    Checkpoint moved = std::move(ck).value();
    EXPECT_EQ(moved.get("c.u8")->data, before);
    EXPECT_EQ(moved.get("c.u8")->data[2], 3);
}

TEST(Safetensors, HeaderPaddingAndZeroSizedTensorsAccepted) {
    const std::string h = R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                          R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}   )";
    auto r = parse_safetensors(raw_file(h, 2), "x.safetensors");
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->tensors.size(), 2u);
    EXPECT_EQ(r->data_start, 8 + h.size());
}

struct BadCase {
    const char* label;
    std::vector<uint8_t> bytes;
    const char* must_mention;  // tensor name (or another key word) the message must contain
};

std::vector<BadCase> bad_cases() {
    const auto e = [](const char* name, const char* dtype, const char* shape, const char* off) {
        return fmt::format(R"("{}":{{"dtype":"{}","shape":{},"data_offsets":{}}})", name, dtype, shape, off);
    };
    const auto obj = [](const std::string& a, const std::string& b = "") {
        return "{" + a + (b.empty() ? "" : "," + b) + "}";
    };
    const std::string good_a = e("t.a", "F32", "[2]", "[0,8]");
    std::vector<BadCase> c;
    c.push_back({"short file", {1, 2, 3}, "too short"});
    c.push_back({"zero header length", raw_file("{}", 0, 0), "header length"});
    c.push_back({"header past end", raw_file(obj(good_a), 8, 4096), "past the end"});
    c.push_back({"header over 100MB", raw_file(obj(good_a), 8, 200ull << 20), "limit"});
    c.push_back({"invalid json", raw_file(R"({"t.a": {"dtype": )", 0), "JSON"});
    c.push_back({"not an object", raw_file(R"({}[1,2])", 0), "JSON"});
    c.push_back({"array header", raw_file(" [1,2]", 0), "header"});
    c.push_back({"nul padding", raw_file(obj(good_a) + std::string(3, '\0'), 8), "JSON"});
    c.push_back({"unknown dtype", raw_file(obj(e("t.q", "Q4_K", "[2]", "[0,8]")), 8), "t.q"});
    c.push_back({"shape/bytes mismatch", raw_file(obj(e("t.m", "F32", "[3]", "[0,8]")), 8), "t.m"});
    c.push_back({"offset out of range", raw_file(obj(e("t.o", "F32", "[2]", "[8,16]")), 8), "t.o"});
    c.push_back({"overlap", raw_file(obj(good_a, e("t.ov", "F32", "[1]", "[4,8]")), 8), "t.ov"});
    c.push_back({"hole", raw_file(obj(e("t.h", "F32", "[1]", "[4,8]")), 8), "t.h"});
    c.push_back({"trailing bytes", raw_file(obj(e("t.tr", "F32", "[1]", "[0,4]")), 8), "t.tr"});
    c.push_back({"negative dim", raw_file(obj(e("t.neg", "F32", "[-2]", "[0,8]")), 8), "t.neg"});
    c.push_back({"float dim", raw_file(obj(e("t.fl", "F32", "[2.0]", "[0,8]")), 8), "t.fl"});
    c.push_back(
        {"huge dims overflow", raw_file(obj(e("t.big", "F32", "[4294967296,4294967296]", "[0,8]")), 8), "t.big"});
    c.push_back({"end before begin", raw_file(obj(e("t.rev", "F32", "[0]", "[8,0]")), 8), "t.rev"});
    c.push_back({"offsets arity", raw_file(obj(e("t.ar", "F32", "[2]", "[0,8,9]")), 8), "t.ar"});
    c.push_back({"offsets negative", raw_file(obj(e("t.no", "F32", "[2]", "[-8,0]")), 8), "t.no"});
    c.push_back({"entry not object", raw_file(R"({"t.s":"F32"})", 0), "t.s"});
    c.push_back({"missing dtype", raw_file(R"({"t.d":{"shape":[0],"data_offsets":[0,0]}})", 0), "t.d"});
    c.push_back(
        {"extra field", raw_file(R"({"t.x":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"y":1}})", 0), "t.x"});
    c.push_back({"duplicate tensor", raw_file(obj(good_a, e("t.a", "F32", "[2]", "[0,8]")), 8), "t.a"});
    c.push_back({"metadata not strings", raw_file(R"({"__metadata__":{"k":1}})", 0), "__metadata__"});
    c.push_back({"metadata not object", raw_file(R"({"__metadata__":[]})", 0), "__metadata__"});
    c.push_back({"empty name", raw_file(R"({"":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})", 0), "empty"});
    c.push_back({"bad utf8", raw_file("{\"t.\xff\":{}}", 0), "JSON"});
    return c;
}

TEST(Safetensors, MalformedFilesGiveErrorsNamingFileAndTensor) {
    TempDir dir;
    for (const auto& c : bad_cases()) {
        SCOPED_TRACE(c.label);
        auto r = parse_safetensors(c.bytes, "bad.safetensors");
        ASSERT_FALSE(r.is_ok());
        EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
        EXPECT_TRUE(contains(r.status().message(), "bad.safetensors")) << r.status().message();
        EXPECT_TRUE(contains(r.status().message(), c.must_mention)) << r.status().message();
        // Same through the file-level API.
        const std::string path = dir.file("bad.safetensors");
        write_bytes(path, c.bytes);
        auto ck = Checkpoint::open(path);
        ASSERT_FALSE(ck.is_ok());
        EXPECT_TRUE(contains(ck.status().message(), path)) << ck.status().message();
    }
}

TEST(Safetensors, EveryTruncationOfAValidFileIsAnErrorNotACrash) {
    SafetensorsWriter w;
    const std::vector<float> v = {1, 2, 3, 4};
    ASSERT_TRUE(w.add_f32("x", {4}, v).is_ok());
    ASSERT_TRUE(w.add_bf16("y", {2, 2}, v).is_ok());
    auto bytes = w.serialize();
    ASSERT_TRUE(bytes.is_ok());
    ASSERT_TRUE(parse_safetensors(*bytes, "f").is_ok());
    for (size_t n = 0; n < bytes->size(); ++n) {
        std::span<const uint8_t> prefix(bytes->data(), n);
        EXPECT_FALSE(parse_safetensors(prefix, "f").is_ok()) << n;
    }
}

// ---- Directory layouts -------------------------------------------------------------------------

Status write_shard(const std::string& path, const std::vector<std::string>& names) {
    SafetensorsWriter w;
    float x = 0;
    for (const auto& n : names) {
        const std::vector<float> v = {x, x + 1};
        x += 2;
        DSV4_RETURN_IF_ERROR(w.add_f32(n, {2}, v));
    }
    return w.write(path);
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(Checkpoint, ShardedIndex) {
    TempDir dir;
    ASSERT_TRUE(write_shard(dir.file("model-00001-of-00002.safetensors"), {"a", "b"}).is_ok());
    ASSERT_TRUE(write_shard(dir.file("model-00002-of-00002.safetensors"), {"c"}).is_ok());
    write_text(dir.file("model.safetensors.index.json"),
               R"({"metadata":{"total_size":24},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
               R"("b":"model-00001-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
    auto ck = Checkpoint::open(dir.str());
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ck->metadata().at("total_size"), "24");
    auto c = ck->get("c");
    ASSERT_TRUE(c.is_ok());
    EXPECT_TRUE(contains(c->file, "model-00002-of-00002"));
    const int64_t s[] = {2};
    auto cv = load_f32(*ck, "c", s);
    ASSERT_TRUE(cv.is_ok());
    EXPECT_EQ(*cv, (std::vector<float>{0, 1}));
}

TEST(Checkpoint, ShardedIndexErrors) {
    TempDir dir;
    const std::string s1 = "s1.safetensors", s2 = "s2.safetensors";
    ASSERT_TRUE(write_shard(dir.file(s1), {"a", "b"}).is_ok());
    ASSERT_TRUE(write_shard(dir.file(s2), {"c"}).is_ok());
    const auto index = dir.file("model.safetensors.index.json");
    const auto expect_error = [&](const std::string& json, std::initializer_list<std::string_view> words) {
        write_text(index, json);
        auto ck = Checkpoint::open(dir.str());
        ASSERT_FALSE(ck.is_ok()) << json;
        for (auto w : words) EXPECT_TRUE(contains(ck.status().message(), w)) << ck.status().message();
    };
    // Missing shard file.
    expect_error(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s9.safetensors"}})",
                 {"s9.safetensors", "c"});
    // Tensor listed in the wrong shard.
    expect_error(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s1.safetensors"}})",
                 {"s1.safetensors", "'c'"});
    // Shard holds a tensor the index does not list.
    expect_error(R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})", {"s1.safetensors", "'b'"});
    // Malformed index and path escapes.
    expect_error(R"({"weight_map":)", {"model.safetensors.index.json"});
    expect_error(R"({"weight_map":{"a":3}})", {"'a'"});
    expect_error(R"({"weight_map":{"a":"../s1.safetensors"}})", {"'a'", "../s1"});
    expect_error(R"({"metadata":{}})", {"weight_map"});
}

// Found by tests/fuzz/safetensors_index_fuzz.cpp: a shard name with a NUL byte opened the file its
// C string names ("s1.safetensors"), not the one the index names.
TEST(Checkpoint, IndexShardNameWithNulIsAnError) {
    TempDir dir;
    ASSERT_TRUE(write_shard(dir.file("s1.safetensors"), {"a"}).is_ok());
    write_text(dir.file("model.safetensors.index.json"), R"({"weight_map":{"a":"s1.safetensors\u0000.bak"}})");
    auto ck = Checkpoint::open(dir.str());
    ASSERT_FALSE(ck.is_ok());
    EXPECT_EQ(ck.status().code(), StatusCode::kDataLoss);
    EXPECT_TRUE(contains(ck.status().message(), "tensor 'a'")) << ck.status().message();
    EXPECT_TRUE(contains(ck.status().message(), "is not a file name in its directory")) << ck.status().message();
}

TEST(Checkpoint, DirectoryLayouts) {
    TempDir dir;
    EXPECT_EQ(Checkpoint::open(dir.str()).status().code(), StatusCode::kNotFound);
    EXPECT_EQ(Checkpoint::open(dir.file("absent")).status().code(), StatusCode::kNotFound);
    ASSERT_TRUE(write_shard(dir.file("one.safetensors"), {"a"}).is_ok());
    ASSERT_TRUE(write_shard(dir.file("two.safetensors"), {"b"}).is_ok());
    auto both = Checkpoint::open(dir.str());
    ASSERT_TRUE(both.is_ok()) << both.status().to_string();
    EXPECT_EQ(both->names(), (std::vector<std::string>{"a", "b"}));
    // The same name in two files is ambiguous.
    ASSERT_TRUE(write_shard(dir.file("three.safetensors"), {"a"}).is_ok());
    auto dup = Checkpoint::open(dir.str());
    ASSERT_FALSE(dup.is_ok());
    EXPECT_TRUE(contains(dup.status().message(), "'a'")) << dup.status().message();
    // model.safetensors wins over other files.
    ASSERT_TRUE(write_shard(dir.file("model.safetensors"), {"m"}).is_ok());
    auto single = Checkpoint::open(dir.str());
    ASSERT_TRUE(single.is_ok());
    EXPECT_EQ(single->names(), (std::vector<std::string>{"m"}));
}

// ---- Typed loading -----------------------------------------------------------------------------

TEST(Checkpoint, AttnSinkF32AndBf16LoadIdentically) {  // B07
    TempDir dir;
    // bf16-representable values, including ones whose f32 low halves would decode large as bf16.
    std::vector<float> sink;
    for (int h = 0; h < 16; ++h) sink.push_back(round_bf16(float(h - 8) * 0.37f));
    SafetensorsWriter w;
    ASSERT_TRUE(w.add_f32("f32.attn_sink", {16}, sink).is_ok());
    ASSERT_TRUE(w.add_bf16("bf16.attn_sink", {16}, sink).is_ok());
    const std::vector<int64_t> ints(16, 1);
    ASSERT_TRUE(w.add_i64("i64.attn_sink", {16}, ints).is_ok());
    ASSERT_TRUE(w.write(dir.file("s.safetensors")).is_ok());
    auto ck = Checkpoint::open(dir.file("s.safetensors"));
    ASSERT_TRUE(ck.is_ok());
    const int64_t shape[] = {16};
    auto a = load_f32(*ck, "f32.attn_sink", shape);
    auto b = load_f32(*ck, "bf16.attn_sink", shape);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(*a, sink);
    EXPECT_EQ(*b, sink);
    auto bad = load_f32(*ck, "i64.attn_sink", shape);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_TRUE(contains(bad.status().message(), "i64.attn_sink") && contains(bad.status().message(), "I64"));
    const int64_t wrong[] = {8, 2};
    auto bad_shape = load_f32(*ck, "f32.attn_sink", wrong);
    ASSERT_FALSE(bad_shape.is_ok());
    EXPECT_TRUE(contains(bad_shape.status().message(), "[8, 2]")) << bad_shape.status().message();
}

TEST(Checkpoint, Tid2eidI64AndI32) {  // B11
    TempDir dir;
    const int64_t vocab = 5, k = 3;
    std::vector<int64_t> t64;
    std::vector<int32_t> t32;
    for (int64_t i = 0; i < vocab * k; ++i) {
        t64.push_back((i * 5) % 7);
        t32.push_back(int32_t((i * 5) % 7));
    }
    std::vector<int64_t> huge = t64;
    huge[4] = int64_t(1) << 33;
    SafetensorsWriter w;
    ASSERT_TRUE(w.add_i64("l0.tid2eid", {vocab, k}, t64).is_ok());
    ASSERT_TRUE(w.add_i32("l1.tid2eid", {vocab, k}, t32).is_ok());
    ASSERT_TRUE(w.add_i64("l2.tid2eid", {vocab, k}, huge).is_ok());
    ASSERT_TRUE(w.add_bf16("l3.tid2eid", {vocab, k}, std::vector<float>(size_t(vocab * k), 1.0f)).is_ok());
    ASSERT_TRUE(w.write(dir.file("t.safetensors")).is_ok());
    auto ck = Checkpoint::open(dir.file("t.safetensors"));
    ASSERT_TRUE(ck.is_ok());
    const int64_t shape[] = {vocab, k};
    auto a = load_i32(*ck, "l0.tid2eid", shape);
    auto b = load_i32(*ck, "l1.tid2eid", shape);
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(*a, t32);
    EXPECT_EQ(*b, t32);
    EXPECT_TRUE(check_int_range(*a, 0, 7, "l0.tid2eid").is_ok());
    auto range = check_int_range(*a, 0, 6, "l0.tid2eid");
    ASSERT_FALSE(range.is_ok());
    EXPECT_TRUE(contains(range.message(), "l0.tid2eid") && contains(range.message(), "= 6")) << range.message();
    EXPECT_TRUE(check_rows_distinct(*a, k, "l0.tid2eid").is_ok());
    const std::vector<int32_t> rep = {0, 1, 2, 3, 3, 4};
    EXPECT_FALSE(check_rows_distinct(rep, 3, "x").is_ok());
    auto over = load_i32(*ck, "l2.tid2eid", shape);
    ASSERT_FALSE(over.is_ok());
    EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
    EXPECT_TRUE(contains(over.status().message(), "l2.tid2eid")) << over.status().message();
    auto bf = load_i32(*ck, "l3.tid2eid", shape);  // a float table must never be rounded into ids
    ASSERT_FALSE(bf.is_ok());
    EXPECT_TRUE(contains(bf.status().message(), "BF16"));
    const int64_t wrong[] = {k, vocab};
    EXPECT_FALSE(load_i32(*ck, "l0.tid2eid", wrong).is_ok());
    EXPECT_EQ(load_i32(*ck, "missing", shape).status().code(), StatusCode::kNotFound);
}

// A file written by the reference `safetensors` library (torch 2.11, safetensors 0.8.0; regenerate
// with tests/data/safetensors/make_hf_fixture.py): the reader must accept real files, not only
// its own writer's.
TEST(Checkpoint, ReadsFileWrittenByReferenceLibrary) {
    const std::string path = std::string(DSV4_SOURCE_DIR) + "/tests/data/safetensors/hf_reference.safetensors";
    auto ck = Checkpoint::open(path);
    ASSERT_TRUE(ck.is_ok()) << ck.status().to_string();
    EXPECT_EQ(ck->names().size(), 13u);
    EXPECT_EQ(ck->metadata().at("format"), "pt");
    const auto f32 = [&](const char* name, std::vector<int64_t> shape) {
        auto r = load_f32(*ck, name, shape);
        EXPECT_TRUE(r.is_ok()) << r.status().to_string();
        return r.is_ok() ? *r : std::vector<float>{};
    };
    EXPECT_EQ(f32("f32", {2, 3}), (std::vector<float>{-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f}));
    EXPECT_EQ(f32("bf16", {5}), (std::vector<float>{-0.5f, -0.25f, 0.0f, 0.25f, 0.5f}));
    EXPECT_EQ(f32("f16", {3}), (std::vector<float>{1.0f, -2.0f, 0.5f}));
    EXPECT_EQ(f32("scalar", {}), (std::vector<float>{3.0f}));
    EXPECT_TRUE(f32("empty", {0, 4}).empty());
    EXPECT_EQ(f32("fp8.weight", {2, 3}), (std::vector<float>{2.0f, -4.0f, 1.0f, 896.0f, 0.0f, -0.25f}));
    std::vector<float> mx(32, 0.0f);
    mx[0] = 2.0f;  // byte 0x21: low nibble code 1 (0.5), high nibble code 2 (1.0); scale 4
    mx[1] = 4.0f;
    EXPECT_EQ(f32("mx.weight", {1, 32}), mx);
    auto i64 = load_i32(*ck, "i64", std::vector<int64_t>{2, 3});
    ASSERT_TRUE(i64.is_ok());
    EXPECT_EQ(*i64, (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
    auto i32 = load_i32(*ck, "i32", std::vector<int64_t>{2});
    ASSERT_TRUE(i32.is_ok());
    EXPECT_EQ(*i32, (std::vector<int32_t>{7, -1}));
    EXPECT_TRUE(ck->get("i8", DType::kI8, std::vector<int64_t>{2}).is_ok());
    EXPECT_TRUE(ck->get("u8", DType::kU8, std::vector<int64_t>{3}).is_ok());
}

}  // namespace
}  // namespace dsv4
