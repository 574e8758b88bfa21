// The parts of libnghttp2's C interface (ABI of libnghttp2.so.14) that grpc_h2.cc calls, declared by this
// project from nghttp2's documented API: the session, its callbacks, requests with a data provider, PING and
// GOAWAY, and the memory-based send/receive functions. Only what is used is declared; the library is linked by
// its full path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <sys/types.h>

extern "C" {

struct nghttp2_session;
struct nghttp2_session_callbacks;
struct nghttp2_priority_spec;

// a header name/value pair; flags 0: the library copies both
struct nghttp2_nv {
  uint8_t* name;
  uint8_t* value;
  size_t namelen;
  size_t valuelen;
  uint8_t flags;
};

// every frame starts with this header; callbacks get a frame whose first member it is
struct nghttp2_frame_hd {
  size_t length;
  int32_t stream_id;
  uint8_t type;
  uint8_t flags;
  uint8_t reserved;
};
// a GOAWAY frame: the server stops taking streams; error code and debug data say why ("too_many_pings")
struct nghttp2_goaway {
  nghttp2_frame_hd hd;
  int32_t last_stream_id;
  uint32_t error_code;
  uint8_t* opaque_data;
  size_t opaque_data_len;
  uint8_t reserved;
};
union nghttp2_frame {
  nghttp2_frame_hd hd;
  nghttp2_goaway goaway;
};

struct nghttp2_settings_entry {
  int32_t settings_id;
  uint32_t value;
};

union nghttp2_data_source {
  int fd;
  void* ptr;
};

typedef ssize_t (*nghttp2_data_source_read_callback)(nghttp2_session* session, int32_t stream_id, uint8_t* buf,
                                                     size_t length, uint32_t* data_flags, nghttp2_data_source* source,
                                                     void* user_data);
struct nghttp2_data_provider {
  nghttp2_data_source source;
  nghttp2_data_source_read_callback read_callback;
};

typedef int (*nghttp2_on_header_callback)(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                                          size_t namelen, const uint8_t* value, size_t valuelen, uint8_t flags,
                                          void* user_data);
typedef int (*nghttp2_on_data_chunk_recv_callback)(nghttp2_session* session, uint8_t flags, int32_t stream_id,
                                                   const uint8_t* data, size_t len, void* user_data);
typedef int (*nghttp2_on_stream_close_callback)(nghttp2_session* session, int32_t stream_id, uint32_t error_code,
                                                void* user_data);
typedef int (*nghttp2_on_frame_recv_callback)(nghttp2_session* session, const nghttp2_frame* frame, void* user_data);

int nghttp2_session_callbacks_new(nghttp2_session_callbacks** callbacks);
void nghttp2_session_callbacks_del(nghttp2_session_callbacks* callbacks);
void nghttp2_session_callbacks_set_on_header_callback(nghttp2_session_callbacks* callbacks,
                                                      nghttp2_on_header_callback callback);
void nghttp2_session_callbacks_set_on_data_chunk_recv_callback(nghttp2_session_callbacks* callbacks,
                                                               nghttp2_on_data_chunk_recv_callback callback);
void nghttp2_session_callbacks_set_on_stream_close_callback(nghttp2_session_callbacks* callbacks,
                                                            nghttp2_on_stream_close_callback callback);
void nghttp2_session_callbacks_set_on_frame_recv_callback(nghttp2_session_callbacks* callbacks,
                                                          nghttp2_on_frame_recv_callback callback);

int nghttp2_session_client_new(nghttp2_session** session, const nghttp2_session_callbacks* callbacks, void* user_data);
void nghttp2_session_del(nghttp2_session* session);
int nghttp2_submit_settings(nghttp2_session* session, uint8_t flags, const nghttp2_settings_entry* entries, size_t count);
int nghttp2_session_set_local_window_size(nghttp2_session* session, uint8_t flags, int32_t stream_id, int32_t size);
int32_t nghttp2_submit_request(nghttp2_session* session, const nghttp2_priority_spec* priority, const nghttp2_nv* headers,
                               size_t count, const nghttp2_data_provider* data, void* stream_user_data);
ssize_t nghttp2_session_mem_send(nghttp2_session* session, const uint8_t** data);
ssize_t nghttp2_session_mem_recv(nghttp2_session* session, const uint8_t* in, size_t length);
int nghttp2_submit_ping(nghttp2_session* session, uint8_t flags, const uint8_t* opaque_data);
int nghttp2_session_want_read(nghttp2_session* session);
int nghttp2_session_want_write(nghttp2_session* session);
void* nghttp2_session_get_stream_user_data(nghttp2_session* session, int32_t stream_id);
const char* nghttp2_strerror(int error);

}  // extern "C"

// constants of the documented API that grpc_h2.cc uses
constexpr uint8_t kNghttp2FlagNone = 0;
constexpr uint32_t kNghttp2DataFlagEof = 0x01;
constexpr int32_t kNghttp2SettingsEnablePush = 0x02;
constexpr int32_t kNghttp2SettingsInitialWindowSize = 0x04;
constexpr int32_t kNghttp2MaxWindowSize = 0x7fffffff;
constexpr uint8_t kNghttp2Goaway = 0x07;  // frame type
