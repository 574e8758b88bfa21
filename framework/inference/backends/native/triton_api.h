// sonic-hep's own declarations of the part of Triton's backend API (tritonbackend / tritonserver C API,
// backend API 1.x as documented by the Triton Inference Server project) that backend.cc calls. Only
// what is used is declared. The functions live in the tritonserver process (libtritonserver); the
// library is not linked against it: every function is declared weak, so the backend also loads outside a
// server (build.py's check), and inside one the dynamic linker binds each to the server's definition.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// opaque handles
struct TRITONSERVER_Error;
struct TRITONSERVER_Message;
struct TRITONBACKEND_Backend;
struct TRITONBACKEND_Model;
struct TRITONBACKEND_ModelInstance;
struct TRITONBACKEND_Request;
struct TRITONBACKEND_Response;
struct TRITONBACKEND_Input;
struct TRITONBACKEND_Output;

// enums: the documented numeric values
enum TritonDataType : int {
  kTritonInvalid = 0, kTritonBool = 1, kTritonUint8 = 2, kTritonUint16 = 3, kTritonUint32 = 4, kTritonUint64 = 5,
  kTritonInt8 = 6, kTritonInt16 = 7, kTritonInt32 = 8, kTritonInt64 = 9, kTritonFp16 = 10, kTritonFp32 = 11,
  kTritonFp64 = 12, kTritonBytes = 13, kTritonBf16 = 14
};
enum TritonErrorCode : int {
  kTritonErrorUnknown = 0, kTritonErrorInternal = 1, kTritonErrorNotFound = 2, kTritonErrorInvalidArg = 3,
  kTritonErrorUnavailable = 4, kTritonErrorUnsupported = 5
};
enum TritonMemoryType : int { kTritonMemoryCpu = 0, kTritonMemoryCpuPinned = 1, kTritonMemoryGpu = 2 };
enum TritonInstanceKind : int { kTritonKindAuto = 0, kTritonKindCpu = 1, kTritonKindGpu = 2, kTritonKindModel = 3 };
enum TritonLogLevel : int { kTritonLogInfo = 0, kTritonLogWarn = 1, kTritonLogError = 2, kTritonLogVerbose = 3 };
enum TritonArtifactType : int { kTritonArtifactFilesystem = 0 };
constexpr uint32_t kTritonReleaseAll = 1;         // request release flag: the backend is done with it
constexpr uint32_t kTritonResponseFinal = 1;      // response send flag: the last response of its request
constexpr uint32_t kTritonBackendApiMajor = 1;    // the API this file describes: 1.x with x >= 10
constexpr uint32_t kTritonBackendApiMinor = 10;

#define SONIC_WEAK __attribute__((weak))
using TE = TRITONSERVER_Error;

// tritonserver: errors, messages, logging
SONIC_WEAK TE* TRITONSERVER_ErrorNew(TritonErrorCode code, const char* message);
SONIC_WEAK void TRITONSERVER_ErrorDelete(TE* error);
SONIC_WEAK const char* TRITONSERVER_ErrorMessage(TE* error);
SONIC_WEAK TE* TRITONSERVER_MessageSerializeToJson(TRITONSERVER_Message* message, const char** base, size_t* size);
SONIC_WEAK TE* TRITONSERVER_MessageDelete(TRITONSERVER_Message* message);
SONIC_WEAK TE* TRITONSERVER_LogMessage(TritonLogLevel level, const char* file, int line, const char* message);

// tritonbackend: the backend, models and instances
SONIC_WEAK TE* TRITONBACKEND_ApiVersion(uint32_t* major, uint32_t* minor);
SONIC_WEAK TE* TRITONBACKEND_ModelName(TRITONBACKEND_Model* model, const char** name);
SONIC_WEAK TE* TRITONBACKEND_ModelVersion(TRITONBACKEND_Model* model, uint64_t* version);
SONIC_WEAK TE* TRITONBACKEND_ModelRepository(TRITONBACKEND_Model* model, TritonArtifactType* type, const char** location);
SONIC_WEAK TE* TRITONBACKEND_ModelConfig(TRITONBACKEND_Model* model, uint32_t config_version,
                                         TRITONSERVER_Message** config);
SONIC_WEAK TE* TRITONBACKEND_ModelSetState(TRITONBACKEND_Model* model, void* state);
SONIC_WEAK TE* TRITONBACKEND_ModelState(TRITONBACKEND_Model* model, void** state);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceName(TRITONBACKEND_ModelInstance* instance, const char** name);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceKind(TRITONBACKEND_ModelInstance* instance, TritonInstanceKind* kind);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceDeviceId(TRITONBACKEND_ModelInstance* instance, int32_t* device);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceModel(TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Model** model);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceSetState(TRITONBACKEND_ModelInstance* instance, void* state);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceState(TRITONBACKEND_ModelInstance* instance, void** state);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceReportStatistics(TRITONBACKEND_ModelInstance* instance,
                                                           TRITONBACKEND_Request* request, bool success,
                                                           uint64_t exec_start_ns, uint64_t compute_start_ns,
                                                           uint64_t compute_end_ns, uint64_t exec_end_ns);
SONIC_WEAK TE* TRITONBACKEND_ModelInstanceReportBatchStatistics(TRITONBACKEND_ModelInstance* instance,
                                                                uint64_t batch_size, uint64_t exec_start_ns,
                                                                uint64_t compute_start_ns, uint64_t compute_end_ns,
                                                                uint64_t exec_end_ns);

// tritonbackend: requests, inputs, responses, outputs
SONIC_WEAK TE* TRITONBACKEND_RequestInput(TRITONBACKEND_Request* request, const char* name, TRITONBACKEND_Input** input);
SONIC_WEAK TE* TRITONBACKEND_RequestOutputCount(TRITONBACKEND_Request* request, uint32_t* count);
SONIC_WEAK TE* TRITONBACKEND_RequestOutputName(TRITONBACKEND_Request* request, uint32_t index, const char** name);
SONIC_WEAK TE* TRITONBACKEND_RequestRelease(TRITONBACKEND_Request* request, uint32_t flags);
SONIC_WEAK TE* TRITONBACKEND_InputProperties(TRITONBACKEND_Input* input, const char** name, TritonDataType* datatype,
                                             const int64_t** shape, uint32_t* dims_count, uint64_t* byte_size,
                                             uint32_t* buffer_count);
SONIC_WEAK TE* TRITONBACKEND_InputBuffer(TRITONBACKEND_Input* input, uint32_t index, const void** buffer,
                                         uint64_t* byte_size, TritonMemoryType* memory_type, int64_t* memory_type_id);
SONIC_WEAK TE* TRITONBACKEND_ResponseNew(TRITONBACKEND_Response** response, TRITONBACKEND_Request* request);
SONIC_WEAK TE* TRITONBACKEND_ResponseDelete(TRITONBACKEND_Response* response);
SONIC_WEAK TE* TRITONBACKEND_ResponseOutput(TRITONBACKEND_Response* response, TRITONBACKEND_Output** output,
                                            const char* name, TritonDataType datatype, const int64_t* shape,
                                            uint32_t dims_count);
SONIC_WEAK TE* TRITONBACKEND_OutputBuffer(TRITONBACKEND_Output* output, void** buffer, uint64_t byte_size,
                                          TritonMemoryType* memory_type, int64_t* memory_type_id);
SONIC_WEAK TE* TRITONBACKEND_ResponseSend(TRITONBACKEND_Response* response, uint32_t flags, TE* error);

}  // extern "C"
