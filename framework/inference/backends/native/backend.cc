// sonic-hep's native Triton backend "onnxruntime": serves platform "onnxruntime_onnx" models in the server
// process through the ONNX Runtime C API, without the python stub's per-request IPC.
//
// What it does, per model config (the same rules as the python-based backend, backends/onnxruntime/model.py):
//  * every fixed-size tensor type; variable dims (-1); max_batch_size; a model without batch dimension;
//  * dynamic batching: the requests of one execution with equal non-batch shapes and the same requested
//    outputs run as ONE onnxruntime call (inputs concatenated on the batch axis, outputs split back);
//    when that call fails, each request is run alone, so a bad request fails alone;
//  * one error per failed response, naming the model, sent for that request only; every request is checked
//    (type, rank, dims, batch size, byte size, buffer bounds) before anything runs;
//  * instance_group count: Triton creates one instance per count, each with its own session and thread;
//    KIND_GPU instances use onnxruntime's CUDA provider when the library has it (onnxruntime-gpu);
//  * optimization.graph.level and the intra_op_thread_count / inter_op_thread_count parameters, as the
//    official backend reads them; SONIC_ORT_THREADS sets the default intra-op threads;
//  * statistics: per request and per execution, reported to Triton;
//  * labels: Triton's core does classification from the config's label files;
//  * a bad model file (empty, not ONNX, truncated, over 2 GiB: onnx_file_problem, the rules of
//    common/model_file.py) or one onnxruntime refuses fails that model's load with one line naming the file;
//    the server and its other models go on.
//
// The onnxruntime library is opened by its full path (SONIC_ORT_LIBRARY, fixed when build.py compiles this
// file), so the server needs no LD_LIBRARY_PATH for it.

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ort_api.h"
#include "triton_api.h"

#ifndef SONIC_ORT_LIBRARY
#error "build.py passes -DSONIC_ORT_LIBRARY=\"/path/to/libonnxruntime.so.1.x\""
#endif

#define SONIC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

// ---------------------------------------------------------------------------------------------------- utilities
uint64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void log(TritonLogLevel level, const std::string& message) {
  if (TRITONSERVER_LogMessage) {
    TE* err = TRITONSERVER_LogMessage(level, __FILE__, __LINE__, message.c_str());
    if (err) TRITONSERVER_ErrorDelete(err);
  }
}

// One line of clean text: a message may come from onnxruntime with line breaks or stray bytes.
std::string one_line(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) out.push_back(c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c));
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

TE* error(TritonErrorCode code, const std::string& message) { return TRITONSERVER_ErrorNew(code, one_line(message).c_str()); }

// Takes a Triton error's text and frees it.
std::string take(TE* err) {
  std::string text = TRITONSERVER_ErrorMessage(err) ? TRITONSERVER_ErrorMessage(err) : "unknown error";
  TRITONSERVER_ErrorDelete(err);
  return text;
}

std::string shape_text(const int64_t* dims, size_t count) {
  std::string out = "[";
  for (size_t i = 0; i < count; ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

// ---------------------------------------------------------------------------------------------------- types
struct TypeInfo {
  const char* config;  // name in a model config (without TYPE_)
  TritonDataType triton;
  int ort;
  size_t size;
};
const TypeInfo kTypes[] = {
    {"BOOL", kTritonBool, kOrtBool, 1},       {"UINT8", kTritonUint8, kOrtUint8, 1},
    {"UINT16", kTritonUint16, kOrtUint16, 2}, {"UINT32", kTritonUint32, kOrtUint32, 4},
    {"UINT64", kTritonUint64, kOrtUint64, 8}, {"INT8", kTritonInt8, kOrtInt8, 1},
    {"INT16", kTritonInt16, kOrtInt16, 2},    {"INT32", kTritonInt32, kOrtInt32, 4},
    {"INT64", kTritonInt64, kOrtInt64, 8},    {"FP16", kTritonFp16, kOrtFloat16, 2},
    {"FP32", kTritonFp32, kOrtFloat, 4},      {"FP64", kTritonFp64, kOrtDouble, 8},
    {"BF16", kTritonBf16, kOrtBfloat16, 2},
};
const TypeInfo* type_by_triton(int triton) {
  for (const auto& t : kTypes)
    if (t.triton == triton) return &t;
  return nullptr;
}
const TypeInfo* type_by_ort(int ort) {
  for (const auto& t : kTypes)
    if (t.ort == ort) return &t;
  return nullptr;
}
std::string triton_type_name(int triton) {
  const TypeInfo* t = type_by_triton(triton);
  return t ? t->config : (triton == kTritonBytes ? "BYTES" : "type " + std::to_string(triton));
}

// ---------------------------------------------------------------------------------------------------- JSON
// A small reader for the model config Triton hands over as JSON (objects, arrays, strings, numbers, literals).
struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* get(const std::string& key) const {
    for (const auto& m : members)
      if (m.first == key) return &m.second;
    return nullptr;
  }
  // numbers may come as JSON strings (64-bit protobuf fields)
  bool as_int(int64_t* out) const {
    if (kind == kNumber) return *out = static_cast<int64_t>(number), true;
    if (kind == kString && !text.empty()) {
      char* end = nullptr;
      long long v = std::strtoll(text.c_str(), &end, 10);
      if (*end == 0) return *out = v, true;
    }
    return false;
  }
  std::string str(const std::string& key, const std::string& fallback = "") const {
    const Json* v = get(key);
    return v && v->kind == kString ? v->text : fallback;
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    const Json* v = get(key);
    int64_t out;
    return v && v->as_int(&out) ? out : fallback;
  }
};

class JsonReader {
 public:
  JsonReader(const char* text, size_t size) : p_(text), end_(text + size) {}
  bool read(Json* out) {
    bool ok = value(out, 0);
    space();
    return ok && p_ == end_;
  }

 private:
  const char* p_;
  const char* end_;
  void space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::strncmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }
  bool string(std::string* out) {
    if (p_ >= end_ || *p_ != '"') return false;
    ++p_;
    while (p_ < end_ && *p_ != '"') {
      char c = *p_++;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (p_ >= end_) return false;
      char e = *p_++;
      switch (e) {
        case 'n': out->push_back('\n'); break;
        case 't': out->push_back('\t'); break;
        case 'r': out->push_back('\r'); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'u': {  // code points of the basic plane, as UTF-8 (names in configs are ASCII in practice)
          if (end_ - p_ < 4) return false;
          unsigned v = static_cast<unsigned>(std::strtoul(std::string(p_, 4).c_str(), nullptr, 16));
          p_ += 4;
          if (v < 0x80) {
            out->push_back(static_cast<char>(v));
          } else if (v < 0x800) {
            out->push_back(static_cast<char>(0xc0 | (v >> 6)));
            out->push_back(static_cast<char>(0x80 | (v & 0x3f)));
          } else {
            out->push_back(static_cast<char>(0xe0 | (v >> 12)));
            out->push_back(static_cast<char>(0x80 | ((v >> 6) & 0x3f)));
            out->push_back(static_cast<char>(0x80 | (v & 0x3f)));
          }
          break;
        }
        default: out->push_back(e);  // \" \\ \/
      }
    }
    if (p_ >= end_) return false;
    ++p_;
    return true;
  }
  bool value(Json* out, int depth) {
    if (depth > 64) return false;
    space();
    if (p_ >= end_) return false;
    char c = *p_;
    if (c == '{') {
      out->kind = Json::kObject;
      ++p_;
      space();
      if (p_ < end_ && *p_ == '}') return ++p_, true;
      while (true) {
        space();
        std::string key;
        if (!string(&key)) return false;
        space();
        if (p_ >= end_ || *p_ != ':') return false;
        ++p_;
        out->members.emplace_back(std::move(key), Json());
        if (!value(&out->members.back().second, depth + 1)) return false;
        space();
        if (p_ < end_ && *p_ == ',') { ++p_; continue; }
        if (p_ < end_ && *p_ == '}') return ++p_, true;
        return false;
      }
    }
    if (c == '[') {
      out->kind = Json::kArray;
      ++p_;
      space();
      if (p_ < end_ && *p_ == ']') return ++p_, true;
      while (true) {
        out->items.emplace_back();
        if (!value(&out->items.back(), depth + 1)) return false;
        space();
        if (p_ < end_ && *p_ == ',') { ++p_; continue; }
        if (p_ < end_ && *p_ == ']') return ++p_, true;
        return false;
      }
    }
    if (c == '"') return out->kind = Json::kString, string(&out->text);
    if (literal("true")) return out->kind = Json::kBool, out->boolean = true, true;
    if (literal("false")) return out->kind = Json::kBool, true;
    if (literal("null")) return true;
    char* stop = nullptr;
    std::string rest(p_, std::min<size_t>(end_ - p_, 64));
    out->number = std::strtod(rest.c_str(), &stop);
    if (stop == rest.c_str()) return false;
    out->kind = Json::kNumber;
    p_ += stop - rest.c_str();
    return true;
  }
};

// ---------------------------------------------------------------------------------------------------- onnxruntime
struct Runtime {
  OrtFunctions ort;
  OrtEnv* env = nullptr;
  OrtMemoryInfo* cpu = nullptr;
  OrtAllocator* allocator = nullptr;
  std::string version;
  bool cuda = false;  // the library has the CUDA execution provider
};
Runtime* g_runtime = nullptr;

// Frees an onnxruntime status and returns its text ("" for success).
std::string status_text(const OrtFunctions& ort, OrtStatus* status) {
  if (!status) return "";
  std::string text = ort.GetErrorMessage(status) ? ort.GetErrorMessage(status) : "unknown onnxruntime error";
  ort.ReleaseStatus(status);
  return text.empty() ? "unknown onnxruntime error" : text;
}

// Opens the onnxruntime library and binds the functions; "" on success, else why not.
std::string open_runtime(Runtime* rt, bool with_env) {
  void* library = dlopen(SONIC_ORT_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  if (!library) return std::string("cannot open ") + SONIC_ORT_LIBRARY + ": " + dlerror();
  auto get_base = reinterpret_cast<SonicOrtGetApiBase>(dlsym(library, "OrtGetApiBase"));
  if (!get_base) return std::string(SONIC_ORT_LIBRARY) + " has no OrtGetApiBase (onnxruntime >= 1.19 needed)";
  const SonicOrtApiBase* base = get_base();
  const void* table = base ? base->GetApi(kOrtRequestedApi) : nullptr;
  if (!table) return "onnxruntime " + std::string(base ? base->GetVersionString() : "?") + " does not offer API version " +
                     std::to_string(kOrtRequestedApi);
  rt->version = base->GetVersionString();
  rt->ort.bind(table);
  const OrtFunctions& ort = rt->ort;
  std::string problem;
  char** providers = nullptr;
  int count = 0;
  if (!(problem = status_text(ort, ort.GetAvailableProviders(&providers, &count))).empty()) return problem;
  bool cpu = false;
  for (int i = 0; i < count; ++i) {
    cpu = cpu || std::strcmp(providers[i], "CPUExecutionProvider") == 0;
    rt->cuda = rt->cuda || std::strcmp(providers[i], "CUDAExecutionProvider") == 0;
  }
  status_text(ort, ort.ReleaseAvailableProviders(providers, count));
  if (!cpu) return "onnxruntime's provider list lacks CPUExecutionProvider: the API table does not match";
  if (!(problem = status_text(ort, ort.CreateCpuMemoryInfo(kOrtArenaAllocator, kOrtMemTypeDefault, &rt->cpu))).empty())
    return problem;
  if (!(problem = status_text(ort, ort.GetAllocatorWithDefaultOptions(&rt->allocator))).empty()) return problem;
  if (with_env && !(problem = status_text(ort, ort.CreateEnv(kOrtLogError, "sonic-hep", &rt->env))).empty())
    return problem;
  return "";
}

// ---------------------------------------------------------------------------------------------------- model
struct TensorSpec {
  std::string name;
  const TypeInfo* type = nullptr;
  std::vector<int64_t> dims;  // without the batch dimension; -1: any size
};

struct Model {
  std::string name;
  std::string path;  // the ONNX file
  int64_t max_batch = 0;
  std::vector<TensorSpec> inputs, outputs;
  int graph_level = kOrtEnableAll;
  int intra_threads = 1, inter_threads = 1;
};

TE* parse_tensors(const Model& model, const Json& config, const char* key, std::vector<TensorSpec>* out) {
  const Json* list = config.get(key);
  if (!list || list->kind != Json::kArray || list->items.empty())
    return error(kTritonErrorInvalidArg, "model '" + model.name + "': the config has no " + key);
  for (const Json& item : list->items) {
    TensorSpec spec;
    spec.name = item.str("name");
    std::string type = item.str("data_type");
    if (type.rfind("TYPE_", 0) == 0) type = type.substr(5);
    for (const auto& t : kTypes)
      if (type == t.config) spec.type = &t;
    if (!spec.type)
      return error(kTritonErrorUnsupported, "model '" + model.name + "': " + key + " '" + spec.name + "' has type " +
                                                type + ", which the native onnxruntime backend does not serve "
                                                "(fixed-size types only; use --backend python)");
    if (item.get("reshape"))
      return error(kTritonErrorUnsupported, "model '" + model.name + "': " + key + " '" + spec.name +
                                                "' has a reshape, which the native onnxruntime backend does not "
                                                "support (use --backend python)");
    if (const Json* dims = item.get("dims"))
      for (const Json& d : dims->items) {
        int64_t v;
        if (!d.as_int(&v)) return error(kTritonErrorInvalidArg, "model '" + model.name + "': bad dims of " + spec.name);
        spec.dims.push_back(v);
      }
    out->push_back(std::move(spec));
  }
  return nullptr;
}

// A config parameter's string_value (parameters { key: K value { string_value: V } }), or "".
std::string parameter(const Json& config, const std::string& key) {
  const Json* params = config.get("parameters");
  const Json* entry = params ? params->get(key) : nullptr;
  return entry ? entry->str("string_value") : "";
}

int positive_int(const std::string& text, int fallback) {
  if (text.empty()) return fallback;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  return (*end == 0 && v >= 0 && v < 4096) ? static_cast<int>(v) : fallback;
}

// What is wrong with the ONNX file at `path`, in one line naming it ("" when it looks like a model): the rules
// and messages of backends/common/model_file.py. onnxruntime answers an empty, random or cut file with a bare
// "Protobuf parsing failed"; this says which of them it is, from the size and the top-level fields of the
// ModelProto (payloads are skipped with a seek: a 1 GB file costs a few reads, never its size in memory).
std::string onnx_file_problem(const std::string& path) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return path + " cannot be read: " + std::strerror(errno);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size == 0) return path + " is empty (0 bytes)";
  if (size > 0x7fffffffull)
    return path + " is " + std::to_string(size) + " bytes, more than the 2 GiB a protobuf can hold (an ONNX model "
                  "that large keeps its weights in external data files)";
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) return path + " cannot be read: " + std::strerror(errno);
  auto varint = [&](uint64_t* out) {  // false: the file ends inside it, or it is longer than 10 bytes
    *out = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      int byte = std::fgetc(file.get());
      if (byte == EOF) return false;
      *out |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return true;
    }
    return false;
  };
  struct Field { int number; const char* name; int wire; };  // onnx.ModelProto's top-level fields
  static const Field kFields[] = {{1, "ir_version", 0},     {2, "producer_name", 2}, {3, "producer_version", 2},
                                  {4, "domain", 2},         {5, "model_version", 0}, {6, "doc_string", 2},
                                  {7, "graph", 2},          {8, "opset_import", 2},  {14, "metadata_props", 2},
                                  {20, "training_info", 2}, {25, "functions", 2},    {26, "configuration", 2}};
  bool seen_ir_version = false, seen_graph = false;
  uint64_t start;
  while ((start = static_cast<uint64_t>(ftello(file.get()))) < size) {
    std::string not_onnx =
        path + " is not an ONNX model (no ONNX ModelProto field at byte " + std::to_string(start) + ")";
    uint64_t key = 0;
    const Field* field = nullptr;
    if (varint(&key))
      for (const Field& f : kFields)
        if (static_cast<uint64_t>(f.number) == key >> 3 && static_cast<uint64_t>(f.wire) == (key & 7)) field = &f;
    if (!field) return not_onnx;
    uint64_t length = 0;
    bool complete = varint(&length);
    uint64_t need = field->wire == 0 ? 0 : length;
    uint64_t left = size - static_cast<uint64_t>(ftello(file.get()));
    if (!complete || need > left) {
      if (!seen_ir_version) return not_onnx;
      std::string needs =
          complete ? "needs " + std::to_string(need) + " bytes, " + std::to_string(left) + " are left" : "is cut off";
      return path + " is truncated (" + std::to_string(size) + " bytes): its " + field->name + " field at byte " +
             std::to_string(start) + " " + needs;
    }
    if (fseeko(file.get(), static_cast<off_t>(need), SEEK_CUR) != 0)
      return path + " cannot be read: " + std::strerror(errno);
    seen_ir_version = seen_ir_version || field->number == 1;
    seen_graph = seen_graph || field->number == 7;
  }
  return seen_graph ? "" : path + " is not an ONNX model (it has no graph)";
}

TE* load_model(TRITONBACKEND_Model* handle, Model* model) {
  const char* name = nullptr;
  uint64_t version = 0;
  const char* location = nullptr;
  TritonArtifactType artifact;
  TRITONSERVER_Message* message = nullptr;
  TE* err = TRITONBACKEND_ModelName(handle, &name);
  if (!err) err = TRITONBACKEND_ModelVersion(handle, &version);
  if (!err) err = TRITONBACKEND_ModelRepository(handle, &artifact, &location);
  if (!err) err = TRITONBACKEND_ModelConfig(handle, 1, &message);
  if (err) return err;
  model->name = name;
  const char* base = nullptr;
  size_t size = 0;
  err = TRITONSERVER_MessageSerializeToJson(message, &base, &size);
  Json config;
  bool parsed = !err && JsonReader(base, size).read(&config) && config.kind == Json::kObject;
  TE* deleted = TRITONSERVER_MessageDelete(message);
  if (deleted) TRITONSERVER_ErrorDelete(deleted);
  if (err) return err;
  if (!parsed) return error(kTritonErrorInternal, "model '" + model->name + "': cannot read its config JSON");
  std::string file = config.str("default_model_filename", "model.onnx");
  if (file.empty()) file = "model.onnx";
  model->path = std::string(location) + "/" + std::to_string(version) + "/" + file;
  if (char* real = realpath(model->path.c_str(), nullptr)) {  // the user's file, not the runtime repository's link
    model->path = real;
    std::free(real);
  }
  std::string unloadable = onnx_file_problem(model->path);  // this model fails to load, the server goes on
  if (!unloadable.empty()) return error(kTritonErrorInvalidArg, "model '" + model->name + "': " + unloadable);
  model->max_batch = config.integer("max_batch_size", 0);
  if ((err = parse_tensors(*model, config, "input", &model->inputs))) return err;
  if ((err = parse_tensors(*model, config, "output", &model->outputs))) return err;
  int64_t level = 0;
  if (const Json* opt = config.get("optimization"))
    if (const Json* graph = opt->get("graph")) level = graph->integer("level", 0);
  model->graph_level = level == -1 ? kOrtEnableBasic : level == 1 ? kOrtEnableExtended : kOrtEnableAll;
  const char* env_threads = std::getenv("SONIC_ORT_THREADS");
  model->intra_threads = positive_int(parameter(config, "intra_op_thread_count"),
                                      positive_int(env_threads ? env_threads : "", 1));
  model->inter_threads = positive_int(parameter(config, "inter_op_thread_count"), 1);
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------- instance
struct Instance {
  Model* model = nullptr;
  TRITONBACKEND_ModelInstance* handle = nullptr;
  OrtSession* session = nullptr;
  std::vector<const char*> input_names;
  bool gpu = false;  // runs on onnxruntime's CUDA execution provider
};

TE* open_session(Instance* self, TritonInstanceKind kind, int32_t device) {
  const OrtFunctions& ort = g_runtime->ort;
  const Model& model = *self->model;
  auto fail = [&](const std::string& what) {
    return error(kTritonErrorInternal, "model '" + model.name + "': onnxruntime cannot open " + model.path + ": " + what);
  };
  OrtSessionOptions* options = nullptr;
  std::string problem = status_text(ort, ort.CreateSessionOptions(&options));
  if (problem.empty()) problem = status_text(ort, ort.SetSessionGraphOptimizationLevel(options, model.graph_level));
  if (problem.empty()) problem = status_text(ort, ort.SetIntraOpNumThreads(options, model.intra_threads));
  if (problem.empty()) problem = status_text(ort, ort.SetInterOpNumThreads(options, model.inter_threads));
  if (problem.empty()) problem = status_text(ort, ort.SetSessionLogSeverityLevel(options, kOrtLogError));
  if (problem.empty() && kind == kTritonKindGpu) {
    if (!g_runtime->cuda) {
      log(kTritonLogWarn, "model '" + model.name + "': a KIND_GPU instance, but onnxruntime " + g_runtime->version +
                              " has no CUDA execution provider (install onnxruntime-gpu); running on CPU");
    } else {
      OrtCUDAProviderOptionsV2* cuda = nullptr;
      problem = status_text(ort, ort.CreateCUDAProviderOptions(&cuda));
      std::string id = std::to_string(device);
      const char* keys[] = {"device_id", "use_tf32"};
      const char* values[] = {id.c_str(), "0"};
      if (problem.empty()) problem = status_text(ort, ort.UpdateCUDAProviderOptions(cuda, keys, values, 1));
      // full fp32, as onnxruntime computes on the CPU and the torch backends on CUDA: onnxruntime's default TF32
      // matrix products and convolutions moved ParticleNet and DeepMET outputs by up to 5e-2 from the CPU's
      std::string tf32;
      if (problem.empty()) tf32 = status_text(ort, ort.UpdateCUDAProviderOptions(cuda, keys + 1, values + 1, 1));
      if (!tf32.empty())
        log(kTritonLogWarn, "model '" + model.name + "': onnxruntime " + g_runtime->version + " cannot turn TF32 off (" +
                                one_line(tf32) + "); its GPU results may differ from the CPU's by 1e-2");
      if (problem.empty()) problem = status_text(ort, ort.SessionOptionsAppendExecutionProvider_CUDA_V2(options, cuda));
      if (cuda) ort.ReleaseCUDAProviderOptions(cuda);
      self->gpu = problem.empty();
      if (!problem.empty()) {  // as onnxruntime's python API does: the CPU provider, after a warning
        log(kTritonLogWarn, "model '" + model.name + "': onnxruntime's CUDA execution provider failed on GPU " +
                                std::to_string(device) + " (" + one_line(problem) + "); running on CPU");
        problem.clear();
      }
    }
  }
  if (problem.empty()) problem = status_text(ort, ort.CreateSession(g_runtime->env, model.path.c_str(), options, &self->session));
  if (options) ort.ReleaseSessionOptions(options);
  if (!problem.empty()) return fail(problem);
  // the config's tensors must be the model's
  for (int side = 0; side < 2; ++side) {
    size_t count = 0;
    problem = status_text(ort, side ? ort.SessionGetOutputCount(self->session, &count)
                                    : ort.SessionGetInputCount(self->session, &count));
    if (!problem.empty()) return fail(problem);
    std::vector<std::string> names;
    for (size_t i = 0; i < count; ++i) {
      char* name = nullptr;
      problem = status_text(ort, side ? ort.SessionGetOutputName(self->session, i, g_runtime->allocator, &name)
                                      : ort.SessionGetInputName(self->session, i, g_runtime->allocator, &name));
      if (!problem.empty()) return fail(problem);
      names.emplace_back(name);
      status_text(ort, ort.AllocatorFree(g_runtime->allocator, name));
    }
    for (const TensorSpec& spec : side ? model.outputs : model.inputs) {
      bool found = false;
      for (const auto& n : names) found = found || n == spec.name;
      if (!found) {
        std::string have;
        for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
        return error(kTritonErrorInvalidArg, "model '" + model.name + "': the config's " + (side ? "output '" : "input '") +
                                                 spec.name + "' is not in " + model.path + " (it has " + have + ")");
      }
    }
  }
  for (const TensorSpec& spec : model.inputs) self->input_names.push_back(spec.name.c_str());
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------- execution
// One request of an execution: its checked inputs, the outputs it asked for, and what became of it.
struct Pending {
  TRITONBACKEND_Request* request = nullptr;
  TRITONBACKEND_Response* response = nullptr;
  std::vector<const char*> data;                // per model input: contiguous bytes
  std::vector<std::vector<int64_t>> shapes;     // per model input
  std::vector<size_t> bytes;                    // per model input
  std::vector<std::unique_ptr<char[]>> copies;  // inputs that came in several buffers
  std::vector<size_t> outputs;                  // indices of the requested model outputs
  int64_t rows = 1;
  std::string failure;                          // set: the request fails with this message
  TritonErrorCode code = kTritonErrorInternal;
  bool done = false;                            // its outputs are in the response
  uint64_t compute_start = 0, compute_end = 0;
};

bool multiply(size_t a, size_t b, size_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Checks a request against the model's config and gathers its inputs; false (with p->failure) if it cannot run.
bool gather(const Model& model, Pending* p) {
  auto bad = [&](const std::string& what) {
    p->failure = "model '" + model.name + "': " + what;
    p->code = kTritonErrorInvalidArg;
    return false;
  };
  int64_t rows = -1;
  for (const TensorSpec& spec : model.inputs) {
    TRITONBACKEND_Input* input = nullptr;
    TE* err = TRITONBACKEND_RequestInput(p->request, spec.name.c_str(), &input);
    if (err || !input) return bad("request has no input '" + spec.name + "'" + (err ? ": " + take(err) : ""));
    TritonDataType type;
    const int64_t* shape = nullptr;
    uint32_t rank = 0, buffers = 0;
    uint64_t byte_size = 0;
    if ((err = TRITONBACKEND_InputProperties(input, nullptr, &type, &shape, &rank, &byte_size, &buffers)))
      return bad("input '" + spec.name + "': " + take(err));
    if (type != spec.type->triton)
      return bad("input '" + spec.name + "' is " + triton_type_name(type) + ", the model takes " + spec.type->config);
    size_t batched = model.max_batch > 0 ? 1 : 0;
    std::vector<int64_t> wanted;
    if (batched) wanted.push_back(-1);
    wanted.insert(wanted.end(), spec.dims.begin(), spec.dims.end());
    bool fits = rank == wanted.size() && (rank == 0 || shape != nullptr);
    for (size_t i = 0; fits && i < rank; ++i) fits = shape[i] >= 0 && (wanted[i] < 0 || wanted[i] == shape[i]);
    if (!fits)
      return bad("input '" + spec.name + "' has shape " + shape_text(shape, shape ? rank : 0) + ", the model takes " +
                 shape_text(wanted.data(), wanted.size()) + " (-1: any size)");
    if (batched) {
      if (shape[0] > model.max_batch)
        return bad("input '" + spec.name + "' has " + std::to_string(shape[0]) + " rows, more than max_batch_size " +
                   std::to_string(model.max_batch));
      if (rows >= 0 && shape[0] != rows)
        return bad("input '" + spec.name + "' has " + std::to_string(shape[0]) + " rows, other inputs " +
                   std::to_string(rows));
      rows = shape[0];
    }
    size_t need = spec.type->size;
    for (uint32_t i = 0; i < rank; ++i)
      if (!multiply(need, static_cast<size_t>(shape[i]), &need)) return bad("input '" + spec.name + "' is too large");
    if (byte_size != need)
      return bad("input '" + spec.name + "' has " + std::to_string(byte_size) + " bytes, its shape " +
                 shape_text(shape, rank) + " of " + spec.type->config + " needs " + std::to_string(need));
    static const char kEmpty[8] = {0};
    const char* data = kEmpty;
    std::unique_ptr<char[]> copy;
    size_t filled = 0;
    for (uint32_t b = 0; b < buffers; ++b) {
      const void* buffer = nullptr;
      uint64_t size = 0;
      TritonMemoryType memory = kTritonMemoryCpu;
      int64_t memory_id = 0;
      if ((err = TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory, &memory_id)))
        return bad("input '" + spec.name + "': " + take(err));
      if (memory == kTritonMemoryGpu) return bad("input '" + spec.name + "' is in GPU memory, which this backend does not read");
      if (size > need - filled || (size > 0 && !buffer))
        return bad("input '" + spec.name + "' buffers hold more than its " + std::to_string(need) + " bytes");
      if (buffers == 1) {
        if (size) data = static_cast<const char*>(buffer);
      } else {
        if (!copy) copy.reset(new char[need ? need : 1]);
        if (size) std::memcpy(copy.get() + filled, buffer, size);
      }
      filled += size;
    }
    if (filled != need)
      return bad("input '" + spec.name + "' buffers hold " + std::to_string(filled) + " bytes, it needs " + std::to_string(need));
    if (copy) {
      data = copy.get();
      p->copies.push_back(std::move(copy));
    }
    p->data.push_back(data);
    p->shapes.emplace_back(shape, shape + rank);
    p->bytes.push_back(need);
  }
  p->rows = model.max_batch > 0 ? rows : 1;
  uint32_t count = 0;
  TE* err = TRITONBACKEND_RequestOutputCount(p->request, &count);
  if (err) return bad(take(err));
  std::vector<bool> wanted(model.outputs.size(), count == 0);
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    if ((err = TRITONBACKEND_RequestOutputName(p->request, i, &name))) return bad(take(err));
    bool found = false;
    for (size_t k = 0; k < model.outputs.size(); ++k)
      if (name && model.outputs[k].name == name) wanted[k] = found = true;
    if (!found) return bad(std::string("request asks for output '") + (name ? name : "?") + "', which the model has not");
  }
  for (size_t k = 0; k < wanted.size(); ++k)
    if (wanted[k]) p->outputs.push_back(k);
  return true;
}

// Runs the members (equal non-batch shapes and outputs) as one onnxruntime call and fills their responses.
// Returns "" on success, else onnxruntime's message (no member's response is then filled).
std::string run(Instance* self, const std::vector<Pending*>& members) {
  const OrtFunctions& ort = g_runtime->ort;
  const Model& model = *self->model;
  const Pending& first = *members.front();
  size_t ninputs = model.inputs.size();
  int64_t total = 0;
  for (const Pending* m : members) total += m->rows;
  std::vector<std::unique_ptr<char[]>> joined;
  std::vector<OrtValue*> inputs(ninputs, nullptr);
  std::string problem;
  for (size_t k = 0; k < ninputs && problem.empty(); ++k) {
    std::vector<int64_t> shape = first.shapes[k];
    const char* data = first.data[k];
    size_t bytes = first.bytes[k];
    if (members.size() > 1) {
      shape[0] = total;
      bytes = 0;
      for (const Pending* m : members) bytes += m->bytes[k];
      joined.emplace_back(new char[bytes ? bytes : 1]);
      size_t at = 0;
      for (const Pending* m : members) {
        if (m->bytes[k]) std::memcpy(joined.back().get() + at, m->data[k], m->bytes[k]);
        at += m->bytes[k];
      }
      data = joined.back().get();
    }
    problem = status_text(ort, ort.CreateTensorWithDataAsOrtValue(g_runtime->cpu, const_cast<char*>(data), bytes,
                                                                  shape.data(), shape.size(),
                                                                  model.inputs[k].type->ort, &inputs[k]));
  }
  std::vector<const char*> output_names;
  for (size_t k : first.outputs) output_names.push_back(model.outputs[k].name.c_str());
  std::vector<OrtValue*> outputs(output_names.size(), nullptr);
  uint64_t start = now_ns();
  if (problem.empty())
    problem = status_text(ort, ort.Run(self->session, nullptr, self->input_names.data(), inputs.data(), ninputs,
                                       output_names.data(), output_names.size(), outputs.data()));
  uint64_t end = now_ns();
  for (OrtValue* v : inputs)
    if (v) ort.ReleaseValue(v);
  // check every output before writing any response
  struct Out {
    const TypeInfo* type;
    std::vector<int64_t> dims;
    const char* data;
    size_t row_bytes;
  };
  std::vector<Out> outs;
  for (size_t j = 0; j < outputs.size() && problem.empty(); ++j) {
    const TensorSpec& spec = model.outputs[first.outputs[j]];
    int is_tensor = 0;
    OrtTensorTypeAndShapeInfo* info = nullptr;
    Out out{};
    int element = 0;
    size_t rank = 0;
    void* data = nullptr;
    problem = status_text(ort, ort.IsTensor(outputs[j], &is_tensor));
    if (problem.empty() && !is_tensor) problem = "output '" + spec.name + "' is not a tensor";
    if (problem.empty()) problem = status_text(ort, ort.GetTensorTypeAndShape(outputs[j], &info));
    if (problem.empty()) problem = status_text(ort, ort.GetTensorElementType(info, &element));
    if (problem.empty()) problem = status_text(ort, ort.GetDimensionsCount(info, &rank));
    if (problem.empty()) {
      out.dims.resize(rank);
      problem = status_text(ort, ort.GetDimensions(info, out.dims.data(), rank));
    }
    if (info) ort.ReleaseTensorTypeAndShapeInfo(info);
    if (problem.empty()) problem = status_text(ort, ort.GetTensorMutableData(outputs[j], &data));
    if (!problem.empty()) break;
    out.type = type_by_ort(element);
    out.data = static_cast<const char*>(data);
    if (out.type != spec.type)
      problem = "output '" + spec.name + "' is " + (out.type ? out.type->config : "a type Triton lacks") +
                ", the config says " + spec.type->config;
    else if (model.max_batch > 0 && (rank == 0 || out.dims[0] != total))
      problem = "output '" + spec.name + "' has shape " + shape_text(out.dims.data(), rank) + ", not " +
                std::to_string(total) + " rows as its inputs";
    out.row_bytes = out.type ? out.type->size : 0;
    for (size_t i = model.max_batch > 0 ? 1 : 0; i < rank; ++i) out.row_bytes *= static_cast<size_t>(out.dims[i]);
    outs.push_back(std::move(out));
  }
  if (problem.empty()) {
    int64_t row = 0;
    for (Pending* m : members) {
      std::string failed;
      for (size_t j = 0; j < outs.size() && failed.empty(); ++j) {
        const Out& out = outs[j];
        std::vector<int64_t> dims = out.dims;
        size_t bytes = out.row_bytes, offset = 0;
        if (model.max_batch > 0) {
          dims[0] = m->rows;
          bytes = out.row_bytes * static_cast<size_t>(m->rows);
          offset = out.row_bytes * static_cast<size_t>(row);
        }
        TRITONBACKEND_Output* output = nullptr;
        void* buffer = nullptr;
        TritonMemoryType memory = kTritonMemoryCpu;
        int64_t memory_id = 0;
        TE* err = TRITONBACKEND_ResponseOutput(m->response, &output, output_names[j], out.type->triton, dims.data(),
                                               static_cast<uint32_t>(dims.size()));
        if (!err) err = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id);
        if (err) {
          failed = take(err);
        } else if (memory == kTritonMemoryGpu || (bytes > 0 && !buffer)) {
          failed = "no CPU memory for output '" + std::string(output_names[j]) + "'";
        } else if (bytes > 0) {
          std::memcpy(buffer, out.data + offset, bytes);
        }
      }
      row += m->rows;
      m->compute_start = start;
      m->compute_end = end;
      if (failed.empty()) {
        m->done = true;
      } else {
        m->failure = "model '" + model.name + "': " + failed;
      }
    }
  }
  for (OrtValue* v : outputs)
    if (v) ort.ReleaseValue(v);
  if (problem.empty()) {
    TE* err = TRITONBACKEND_ModelInstanceReportBatchStatistics(
        self->handle, static_cast<uint64_t>(model.max_batch > 0 ? total : 1), start, start, end, now_ns());
    if (err) TRITONSERVER_ErrorDelete(err);
  }
  return problem;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------- entry points
// A check that needs no server: opens onnxruntime through the same table and calls the cheap functions whose
// answers are known (status, provider list, environment, session options, memory info, CUDA options). 0 and the
// onnxruntime version in `out`, or 1 and why not. The environment comes first: onnxruntime-gpu logs through its
// default logger, which the environment registers, when the CUDA option functions load the CUDA provider.
SONIC_EXPORT int sonic_native_probe(char* out, size_t size) {
  Runtime rt;
  std::string problem = open_runtime(&rt, true);
  if (problem.empty()) {
    OrtStatus* status = rt.ort.CreateStatus(kOrtErrorInvalidArgument, "sonic-probe");
    if (!status || rt.ort.GetErrorCode(status) != kOrtErrorInvalidArgument ||
        std::strcmp(rt.ort.GetErrorMessage(status), "sonic-probe") != 0)
      problem = "onnxruntime's status functions do not answer as expected: the API table does not match";
    if (status) rt.ort.ReleaseStatus(status);
  }
  if (problem.empty()) {
    OrtSessionOptions* options = nullptr;
    problem = status_text(rt.ort, rt.ort.CreateSessionOptions(&options));
    if (problem.empty()) problem = status_text(rt.ort, rt.ort.SetIntraOpNumThreads(options, 1));
    if (problem.empty()) problem = status_text(rt.ort, rt.ort.SetSessionGraphOptimizationLevel(options, kOrtEnableAll));
    if (options) rt.ort.ReleaseSessionOptions(options);
  }
  if (problem.empty()) {
    // the CUDA entries: with onnxruntime-gpu created, updated and released, or, where its CUDA provider library
    // cannot be loaded (no CUDA libraries on this machine), refused naming that library (KIND_GPU instances then
    // run on the CPU); without CUDA both refused as "not enabled"
    OrtCUDAProviderOptionsV2* cuda = nullptr;
    std::string created = status_text(rt.ort, rt.ort.CreateCUDAProviderOptions(&cuda));
    const char* keys[] = {"device_id"};
    const char* values[] = {"0"};
    std::string updated;
    if (!rt.cuda || cuda) updated = status_text(rt.ort, rt.ort.UpdateCUDAProviderOptions(cuda, keys, values, 1));
    std::string refused = created + updated;
    bool expected = rt.cuda ? refused.empty() || refused.find("providers_cuda") != std::string::npos
                            : created.find("CUDA") != std::string::npos && updated.find("CUDA") != std::string::npos;
    if (!expected)
      problem = "onnxruntime's CUDA option functions do not answer as expected: the API table does not match (" +
                one_line(created + " " + updated) + ")";
    if (cuda) rt.ort.ReleaseCUDAProviderOptions(cuda);
  }
  if (rt.cpu) rt.ort.ReleaseMemoryInfo(rt.cpu);
  if (rt.env) rt.ort.ReleaseEnv(rt.env);
  std::snprintf(out, size, "%s", problem.empty() ? rt.version.c_str() : problem.c_str());
  return problem.empty() ? 0 : 1;
}

SONIC_EXPORT TE* TRITONBACKEND_Initialize(TRITONBACKEND_Backend*) {
  // every server function this file declares must have been bound (they are weak: a missing one is null)
  const void* bound[] = {
      reinterpret_cast<const void*>(&TRITONSERVER_ErrorNew), reinterpret_cast<const void*>(&TRITONSERVER_ErrorDelete),
      reinterpret_cast<const void*>(&TRITONSERVER_ErrorMessage),
      reinterpret_cast<const void*>(&TRITONSERVER_MessageSerializeToJson),
      reinterpret_cast<const void*>(&TRITONSERVER_MessageDelete), reinterpret_cast<const void*>(&TRITONSERVER_LogMessage),
      reinterpret_cast<const void*>(&TRITONBACKEND_ApiVersion), reinterpret_cast<const void*>(&TRITONBACKEND_ModelName),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelVersion),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelRepository), reinterpret_cast<const void*>(&TRITONBACKEND_ModelConfig),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelSetState), reinterpret_cast<const void*>(&TRITONBACKEND_ModelState),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceName),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceKind),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceDeviceId),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceModel),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceSetState),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceState),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceReportStatistics),
      reinterpret_cast<const void*>(&TRITONBACKEND_ModelInstanceReportBatchStatistics),
      reinterpret_cast<const void*>(&TRITONBACKEND_RequestInput),
      reinterpret_cast<const void*>(&TRITONBACKEND_RequestOutputCount),
      reinterpret_cast<const void*>(&TRITONBACKEND_RequestOutputName),
      reinterpret_cast<const void*>(&TRITONBACKEND_RequestRelease),
      reinterpret_cast<const void*>(&TRITONBACKEND_InputProperties), reinterpret_cast<const void*>(&TRITONBACKEND_InputBuffer),
      reinterpret_cast<const void*>(&TRITONBACKEND_ResponseNew), reinterpret_cast<const void*>(&TRITONBACKEND_ResponseDelete),
      reinterpret_cast<const void*>(&TRITONBACKEND_ResponseOutput), reinterpret_cast<const void*>(&TRITONBACKEND_OutputBuffer),
      reinterpret_cast<const void*>(&TRITONBACKEND_ResponseSend)};
  for (const void* function : bound)
    if (!function) {
      if (TRITONSERVER_ErrorNew)
        return TRITONSERVER_ErrorNew(kTritonErrorUnsupported, "this Triton server lacks a function sonic-hep's native "
                                                              "onnxruntime backend needs (backend API 1.10+)");
      std::fprintf(stderr, "sonic-hep native onnxruntime backend: not running inside a Triton server\n");
      std::abort();
    }
  uint32_t major = 0, minor = 0;
  TE* err = TRITONBACKEND_ApiVersion(&major, &minor);
  if (err) return err;
  if (major != kTritonBackendApiMajor || minor < kTritonBackendApiMinor)
    return error(kTritonErrorUnsupported, "sonic-hep's native onnxruntime backend needs Triton backend API " +
                                              std::to_string(kTritonBackendApiMajor) + "." +
                                              std::to_string(kTritonBackendApiMinor) + "+, the server has " +
                                              std::to_string(major) + "." + std::to_string(minor));
  auto* rt = new Runtime();
  std::string problem = open_runtime(rt, true);
  if (!problem.empty()) {
    delete rt;
    return error(kTritonErrorUnavailable, "sonic-hep's native onnxruntime backend: " + problem);
  }
  g_runtime = rt;
  log(kTritonLogInfo, "sonic-hep native onnxruntime backend: onnxruntime " + rt->version + " from " + SONIC_ORT_LIBRARY +
                          (rt->cuda ? " (with CUDA)" : ""));
  return nullptr;
}

SONIC_EXPORT TE* TRITONBACKEND_Finalize(TRITONBACKEND_Backend*) {
  if (g_runtime) {
    if (g_runtime->cpu) g_runtime->ort.ReleaseMemoryInfo(g_runtime->cpu);
    if (g_runtime->env) g_runtime->ort.ReleaseEnv(g_runtime->env);
    delete g_runtime;
    g_runtime = nullptr;
  }
  return nullptr;
}

SONIC_EXPORT TE* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* handle) {
  auto* model = new Model();
  TE* err = load_model(handle, model);
  if (!err) err = TRITONBACKEND_ModelSetState(handle, model);
  if (err) delete model;
  return err;
}

SONIC_EXPORT TE* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* handle) {
  void* state = nullptr;
  TE* err = TRITONBACKEND_ModelState(handle, &state);
  if (err) return err;
  delete static_cast<Model*>(state);  // null when its initialisation failed
  return nullptr;
}

SONIC_EXPORT TE* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* handle) {
  TRITONBACKEND_Model* model_handle = nullptr;
  void* model = nullptr;
  TritonInstanceKind kind = kTritonKindCpu;
  int32_t device = 0;
  TE* err = TRITONBACKEND_ModelInstanceModel(handle, &model_handle);
  if (!err) err = TRITONBACKEND_ModelState(model_handle, &model);
  if (!err) err = TRITONBACKEND_ModelInstanceKind(handle, &kind);
  if (!err) err = TRITONBACKEND_ModelInstanceDeviceId(handle, &device);
  if (err) return err;
  auto* self = new Instance();
  self->model = static_cast<Model*>(model);
  self->handle = handle;
  err = open_session(self, kind, device);
  if (!err) err = TRITONBACKEND_ModelInstanceSetState(handle, self);
  const char* name = nullptr;
  TE* unnamed = err ? nullptr : TRITONBACKEND_ModelInstanceName(handle, &name);
  if (unnamed) TRITONSERVER_ErrorDelete(unnamed);  // it only costs the log line
  if (!err && !unnamed && name)
    log(kTritonLogInfo, "model '" + self->model->name + "': instance " + name + " (" +
                            (self->gpu ? "GPU " + std::to_string(device) : "CPU") +
                            ", " + std::to_string(self->model->intra_threads) + " intra-op threads) serves " +
                            self->model->path);
  if (err) {
    if (self->session) g_runtime->ort.ReleaseSession(self->session);
    delete self;
  }
  return err;
}

SONIC_EXPORT TE* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* handle) {
  void* state = nullptr;
  TE* err = TRITONBACKEND_ModelInstanceState(handle, &state);
  if (err) return err;
  // Triton finalizes an instance whose initialisation failed too, before any state was set: without this
  // check one unloadable model file took the whole server down (SIGSEGV) instead of failing alone
  if (!state) return nullptr;
  auto* self = static_cast<Instance*>(state);
  if (self->session) g_runtime->ort.ReleaseSession(self->session);
  delete self;
  return nullptr;
}

// Every request gets exactly one response and is released here; nothing is returned as an error (that would
// make Triton fail every request of the execution with one message).
SONIC_EXPORT TE* TRITONBACKEND_ModelInstanceExecute(TRITONBACKEND_ModelInstance* handle, TRITONBACKEND_Request** requests,
                                                   const uint32_t count) {
  uint64_t exec_start = now_ns();
  void* state = nullptr;
  TE* err = TRITONBACKEND_ModelInstanceState(handle, &state);
  Instance* self = err ? nullptr : static_cast<Instance*>(state);
  if (err) TRITONSERVER_ErrorDelete(err);
  std::vector<Pending> pending(count);
  // requests that can run, grouped by (requested outputs, non-batch shapes), in arrival order
  std::vector<std::pair<std::string, std::vector<Pending*>>> groups;
  std::map<std::string, size_t> group_of;
  for (uint32_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    p.request = requests[i];
    if ((err = TRITONBACKEND_ResponseNew(&p.response, p.request))) {
      log(kTritonLogError, "cannot create a response: " + take(err));
      p.response = nullptr;
      continue;
    }
    if (!self) {
      p.failure = "the native onnxruntime backend lost its model instance";
      continue;
    }
    if (!gather(*self->model, &p)) continue;
    std::string key;
    if (self->model->max_batch > 0) {
      for (size_t k : p.outputs) key += std::to_string(k) + ",";
      key += "|";
      for (const auto& shape : p.shapes) {
        for (size_t d = 1; d < shape.size(); ++d) key += std::to_string(shape[d]) + ",";
        key += ";";
      }
      if (p.rows == 0) key += "#" + std::to_string(i);  // empty requests run alone
    } else {
      key = "#" + std::to_string(i);
    }
    auto found = group_of.find(key);
    if (found == group_of.end()) {
      group_of[key] = groups.size();
      groups.emplace_back(key, std::vector<Pending*>{&p});
    } else {
      groups[found->second].second.push_back(&p);
    }
  }
  for (auto& group : groups) {
    std::vector<Pending*>& members = group.second;
    std::string problem = run(self, members);
    if (problem.empty()) continue;
    if (members.size() == 1) {
      members[0]->failure = "model '" + self->model->name + "': onnxruntime failed: " + problem;
      continue;
    }
    for (Pending* m : members) {  // one bad request must not fail those batched with it
      std::string alone = run(self, {m});
      if (!alone.empty()) m->failure = "model '" + self->model->name + "': onnxruntime failed: " + alone;
    }
  }
  uint64_t exec_end = now_ns();
  for (Pending& p : pending) {
    bool success = p.response && p.failure.empty() && p.done;
    // counted before the answer leaves: a client holding its answer finds it in the statistics
    if (self) {
      uint64_t cs = p.compute_start ? p.compute_start : exec_start, ce = p.compute_end ? p.compute_end : exec_start;
      if ((err = TRITONBACKEND_ModelInstanceReportStatistics(handle, p.request, success, exec_start, cs, ce, exec_end)))
        TRITONSERVER_ErrorDelete(err);
    }
    if (p.response) {
      if (!success) {
        // outputs a failed request may already hold are dropped with its response
        if ((err = TRITONBACKEND_ResponseDelete(p.response))) TRITONSERVER_ErrorDelete(err);
        p.response = nullptr;
        if ((err = TRITONBACKEND_ResponseNew(&p.response, p.request))) {
          log(kTritonLogError, "cannot create an error response: " + take(err));
          p.response = nullptr;
        }
      }
      if (p.response) {
        std::string message = !p.failure.empty() ? p.failure
                              : "model '" + (self ? self->model->name : std::string("?")) + "': request was not run";
        err = TRITONBACKEND_ResponseSend(p.response, kTritonResponseFinal,
                                         success ? nullptr : error(p.code, message));
        if (err) log(kTritonLogError, "cannot send a response: " + take(err));
      }
    }
    if ((err = TRITONBACKEND_RequestRelease(p.request, kTritonReleaseAll)))
      log(kTritonLogError, "cannot release a request: " + take(err));
  }
  return nullptr;
}
