// sonic-hep's own declarations of the part of the ONNX Runtime C API that backend.cc calls, written from
// its documentation. ONNX Runtime hands out its API as a table of function pointers (OrtApi, reached
// through OrtGetApiBase()->GetApi(version)); entries are only ever appended, so an entry's position is
// fixed once released. Here the table is read as an array of pointers: SONIC_ORT_FUNCTIONS lists, for each
// function used, its position in the table, its name and its type. Asking for API version
// kOrtRequestedApi (onnxruntime 1.16) lets one build run on every later onnxruntime. The positions are
// checked when the library is built (sonic_native_probe in backend.cc calls the cheap ones and checks their
// answers: all but CreateSession, Run, the session/tensor queries and the CUDA append) and by the parity
// tests, which run every shipped model through the rest (the CUDA append only runs on a GPU, with onnxruntime-gpu).
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {
struct OrtStatus;
struct OrtEnv;
struct OrtSession;
struct OrtSessionOptions;
struct OrtValue;
struct OrtMemoryInfo;
struct OrtAllocator;
struct OrtTypeInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtRunOptions;
struct OrtCUDAProviderOptionsV2;

// the first two members of the documented OrtApiBase
struct SonicOrtApiBase {
  const void* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)();
};
using SonicOrtGetApiBase = const SonicOrtApiBase* (*)();
}

constexpr uint32_t kOrtRequestedApi = 16;

// documented enum values
enum OrtElementType : int {
  kOrtUndefined = 0, kOrtFloat = 1, kOrtUint8 = 2, kOrtInt8 = 3, kOrtUint16 = 4, kOrtInt16 = 5, kOrtInt32 = 6,
  kOrtInt64 = 7, kOrtString = 8, kOrtBool = 9, kOrtFloat16 = 10, kOrtDouble = 11, kOrtUint32 = 12, kOrtUint64 = 13,
  kOrtBfloat16 = 16
};
enum OrtLogLevel : int { kOrtLogVerbose = 0, kOrtLogInfo = 1, kOrtLogWarning = 2, kOrtLogError = 3, kOrtLogFatal = 4 };
enum OrtGraphLevel : int { kOrtDisableAll = 0, kOrtEnableBasic = 1, kOrtEnableExtended = 2, kOrtEnableAll = 99 };
constexpr int kOrtArenaAllocator = 1;
constexpr int kOrtMemTypeDefault = 0;
constexpr int kOrtErrorInvalidArgument = 2;

// X(position in OrtApi, name, return type, parameter list)
#define SONIC_ORT_FUNCTIONS(X)                                                                                   \
  X(0, CreateStatus, OrtStatus*, (int code, const char* message))                                                \
  X(1, GetErrorCode, int, (const OrtStatus* status))                                                             \
  X(2, GetErrorMessage, const char*, (const OrtStatus* status))                                                  \
  X(3, CreateEnv, OrtStatus*, (int level, const char* log_id, OrtEnv** out))                                     \
  X(7, CreateSession, OrtStatus*, (const OrtEnv* env, const char* path, const OrtSessionOptions* options,        \
                                   OrtSession** out))                                                            \
  X(9, Run, OrtStatus*, (OrtSession * session, const OrtRunOptions* run_options, const char* const* input_names, \
                         const OrtValue* const* inputs, size_t input_count, const char* const* output_names,     \
                         size_t output_count, OrtValue** outputs))                                               \
  X(10, CreateSessionOptions, OrtStatus*, (OrtSessionOptions * *out))                                            \
  X(22, SetSessionLogSeverityLevel, OrtStatus*, (OrtSessionOptions * options, int level))                        \
  X(23, SetSessionGraphOptimizationLevel, OrtStatus*, (OrtSessionOptions * options, int level))                  \
  X(24, SetIntraOpNumThreads, OrtStatus*, (OrtSessionOptions * options, int threads))                            \
  X(25, SetInterOpNumThreads, OrtStatus*, (OrtSessionOptions * options, int threads))                            \
  X(30, SessionGetInputCount, OrtStatus*, (const OrtSession* session, size_t* out))                              \
  X(31, SessionGetOutputCount, OrtStatus*, (const OrtSession* session, size_t* out))                             \
  X(36, SessionGetInputName, OrtStatus*, (const OrtSession* session, size_t index, OrtAllocator* allocator,       \
                                          char** out))                                                           \
  X(37, SessionGetOutputName, OrtStatus*, (const OrtSession* session, size_t index, OrtAllocator* allocator,      \
                                           char** out))                                                          \
  X(49, CreateTensorWithDataAsOrtValue, OrtStatus*, (const OrtMemoryInfo* info, void* data, size_t byte_size,    \
                                                     const int64_t* shape, size_t dims, int element_type,        \
                                                     OrtValue** out))                                            \
  X(50, IsTensor, OrtStatus*, (const OrtValue* value, int* out))                                                 \
  X(51, GetTensorMutableData, OrtStatus*, (OrtValue * value, void** out))                                        \
  X(60, GetTensorElementType, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, int* out))                     \
  X(61, GetDimensionsCount, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, size_t* out))                    \
  X(62, GetDimensions, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t count))         \
  X(65, GetTensorTypeAndShape, OrtStatus*, (const OrtValue* value, OrtTensorTypeAndShapeInfo** out))             \
  X(69, CreateCpuMemoryInfo, OrtStatus*, (int allocator_type, int memory_type, OrtMemoryInfo** out))             \
  X(76, AllocatorFree, OrtStatus*, (OrtAllocator * allocator, void* pointer))                                    \
  X(78, GetAllocatorWithDefaultOptions, OrtStatus*, (OrtAllocator * *out))                                       \
  X(92, ReleaseEnv, void, (OrtEnv * env))                                                                        \
  X(93, ReleaseStatus, void, (OrtStatus * status))                                                               \
  X(94, ReleaseMemoryInfo, void, (OrtMemoryInfo * info))                                                         \
  X(95, ReleaseSession, void, (OrtSession * session))                                                            \
  X(96, ReleaseValue, void, (OrtValue * value))                                                                  \
  X(99, ReleaseTensorTypeAndShapeInfo, void, (OrtTensorTypeAndShapeInfo * info))                                 \
  X(100, ReleaseSessionOptions, void, (OrtSessionOptions * options))                                             \
  X(125, GetAvailableProviders, OrtStatus*, (char*** providers, int* count))                                     \
  X(126, ReleaseAvailableProviders, OrtStatus*, (char** providers, int count))                                   \
  X(204, SessionOptionsAppendExecutionProvider_CUDA_V2, OrtStatus*, (OrtSessionOptions * options,                \
                                                                     const OrtCUDAProviderOptionsV2* cuda))      \
  X(205, CreateCUDAProviderOptions, OrtStatus*, (OrtCUDAProviderOptionsV2 * *out))                               \
  X(206, UpdateCUDAProviderOptions, OrtStatus*, (OrtCUDAProviderOptionsV2 * cuda, const char* const* keys,       \
                                                 const char* const* values, size_t count))                       \
  X(208, ReleaseCUDAProviderOptions, void, (OrtCUDAProviderOptionsV2 * cuda))

// The functions above as typed pointers, bound from the table by position.
struct OrtFunctions {
#define SONIC_ORT_MEMBER(index, name, ret, params) ret(*name) params = nullptr;
  SONIC_ORT_FUNCTIONS(SONIC_ORT_MEMBER)
#undef SONIC_ORT_MEMBER

  void bind(const void* table) {
    auto entries = static_cast<void* const*>(table);
#define SONIC_ORT_BIND(index, name, ret, params) name = reinterpret_cast<ret(*) params>(entries[index]);
    SONIC_ORT_FUNCTIONS(SONIC_ORT_BIND)
#undef SONIC_ORT_BIND
  }
};
