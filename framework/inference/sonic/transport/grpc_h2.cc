// The SONIC data plane's compiled transport: gRPC unary calls over cleartext HTTP/2 (prior knowledge), on
// libnghttp2, without Python's interpreter lock.
//
// Why: on a job's own cores, the Python gRPC client's work around each call (its wrappers, a worker thread
// waking per call, the interpreter lock taken back after the call) is what SONIC costs over direct inference.
// Here one I/O thread per connection writes requests and reads answers, and finished calls are handed to one
// waiting Python thread in batches, so Python pays only for building the request message and for reading the
// answer.
//
// The interface (C, called through ctypes; see transport/native.py):
//   sgt_open(host, port, authority, path, timeout_ms, ping_ms, ping_timeout_ms, error, size)
//                                                a connection (its I/O thread started), or NULL
//   sgt_send(connection, tag, message, length, encoding)
//                                                queues one call (the message without gRPC's 5-byte prefix;
//                                                encoding 1 or 2: already compressed, deflate or gzip); -1 when
//                                                the connection is dead or closing
//   sgt_wait(connection, timeout_ms)              waits for finished calls: their count (0 on timeout), -1 once
//                                                the connection has ended and every call was handed out
//   sgt_result(connection, i, ...)               the i-th finished call of the last wait: tag, gRPC status,
//                                                answer message, status message, and the answer's encoding
//                                                when the server compressed it (decompressed by the caller)
//   sgt_close(connection)                         asks the I/O thread to end: calls still open finish UNAVAILABLE
//   sgt_reason(connection)                        after sgt_wait returned -1: why the connection ended
//   sgt_authorize(connection, value)             the `authorization` header of every call sent from now on
//                                                ("Bearer ..."; empty: none)
//   sgt_free(connection)                          after sgt_wait returned -1: joins the thread, frees everything
//
// Compression (framework/inference/compression.py says why): Python compresses a request and says which encoding;
// here the message gets gRPC's "compressed" flag and the grpc-encoding header. Every call accepts compressed
// answers (grpc-accept-encoding, as gRPC's own clients send it), which a server sends when told to compress its
// responses; such an answer is handed out with its encoding, still compressed.
//
// Identity (framework/inference/sonic/bearer_token.py says why): each call carries the connection's authorization
// value at the time it was sent, as a header HPACK never indexes (RFC 7541 7.1.3: a token must not stay in the
// compression context). An HTTP 401 or 403 without a gRPC status (a proxy refusing the caller) ends the call as
// UNAUTHENTICATED or PERMISSION_DENIED, as gRPC's own clients map them.
//
// Calls are never cancelled: a stream stays open until the server ends it, or until the connection ends
// (closed by the caller, dropped by the server), which fails every open call with UNAVAILABLE and the reason.
//
// Keepalive (framework/inference/keepalive.py says why): after ping_ms with nothing received the I/O thread sends
// an HTTP/2 PING; when nothing at all arrives within ping_timeout_ms after it, the connection is silent (a network
// partition, a frozen host) and ends like a dropped one, with a reason that starts "keepalive:".
#include "nghttp2_api.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#define SONIC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int kUnknown = 2, kPermissionDenied = 7, kInternal = 13, kUnavailable = 14, kUnauthenticated = 16;
constexpr uint8_t kNoIndex = 0x01;  // NGHTTP2_NV_FLAG_NO_INDEX
constexpr uint32_t kRefusedStream = 0x7;  // NGHTTP2_REFUSED_STREAM
// what sgt_send's `encoding` means, by number (0: not compressed)
const char* const kEncodings[] = {"identity", "deflate", "gzip"};
using Clock = std::chrono::steady_clock;

// One call from sgt_send to its end.
struct Call {
  uint64_t tag = 0;
  std::string out;    // gRPC's 5-byte prefix and the request message
  size_t offset = 0;  // bytes of `out` already handed to nghttp2
  std::string in;     // the answer's DATA bytes
  int encoding = 0;   // the request's: an index of kEncodings
  std::string answer_encoding;  // the answer's grpc-encoding header, if any
  int http_status = 0;
  int grpc_status = -1;
  std::string grpc_message;
  std::string authorization;  // its authorization header value (the connection's when it was sent), or empty
};

// One finished call, waiting to be read by the Python thread.
struct Done {
  uint64_t tag;
  int status;
  std::string message;
  std::string body;
  std::string encoding;  // the body's gRPC encoding when the server compressed it, else empty
};

struct Connection {
  int fd = -1;
  int wake = -1;  // eventfd: a call was queued, or close was asked
  nghttp2_session* session = nullptr;
  std::string authority, path;
  std::thread io;

  std::mutex mu;  // guards the members down to `ended`
  std::condition_variable cv;
  std::deque<Call*> queued;  // sent by callers, not yet given to nghttp2
  std::deque<Done> done;     // finished, not yet handed out
  bool dead = false;         // accepts no new call
  bool closing = false;      // sgt_close was called
  bool ended = false;        // the I/O thread has ended: no call will finish any more

  std::vector<Done> taken;  // the batch of the last sgt_wait (the waiting thread's own)
  std::set<Call*> open;     // given to nghttp2 and not closed (the I/O thread's own)
  std::string pending;      // bytes nghttp2 produced that the socket has not taken yet (the I/O thread's own)
  bool stopped = false;     // the I/O thread left: nghttp2's callbacks must not touch calls any more

  int ping_ms = 0;          // keepalive: a PING after this long with nothing received (0: never)
  int ping_timeout_ms = 0;  // and the connection is dead when nothing arrives this long after the PING
  Clock::time_point last_read;  // when bytes last arrived (the I/O thread's own, like the two below)
  Clock::time_point ping_at;    // when the unanswered PING went out
  bool pinged = false;          // a PING is out and nothing arrived since
  std::string goaway;           // the server's GOAWAY, if one came: its error code and debug data
  std::string why;              // why the connection ended (set before `ended`)
  std::string authorization;    // sgt_authorize's value, copied into each call sent (guarded by mu)
};

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// The call ends: its outcome goes to the finished list (its answer message cut out of the DATA bytes).
void finish(Connection* c, Call* call, int status, std::string message) {
  Done done{call->tag, status, std::move(message), std::string(), std::string()};
  if (status == 0) {
    const std::string& in = call->in;
    if (in.size() < 5) {
      done.status = kInternal;
      done.message = "the answer has no gRPC message (" + std::to_string(in.size()) + " bytes)";
    } else if (in[0] != 0 && (call->answer_encoding.empty() || call->answer_encoding == "identity")) {
      done.status = kInternal;
      done.message = "the answer is flagged compressed but declares no grpc-encoding";
    } else {
      if (in[0] != 0) done.encoding = call->answer_encoding;
      size_t length = (size_t(uint8_t(in[1])) << 24) | (size_t(uint8_t(in[2])) << 16) |
                      (size_t(uint8_t(in[3])) << 8) | size_t(uint8_t(in[4]));
      if (length > in.size() - 5) {
        done.status = kInternal;
        done.message = "the answer's gRPC message is cut short";
      } else {
        done.body = in.substr(5, length);
      }
    }
  }
  delete call;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->done.push_back(std::move(done));
  }
  c->cv.notify_one();
}

Call* call_of(nghttp2_session* session, int32_t stream, Connection* c) {
  if (c->stopped) return nullptr;
  return static_cast<Call*>(nghttp2_session_get_stream_user_data(session, stream));
}

int on_header(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
              const uint8_t* value, size_t valuelen, uint8_t, void* user) {
  Call* call = call_of(session, frame->hd.stream_id, static_cast<Connection*>(user));
  if (!call) return 0;
  std::string key(reinterpret_cast<const char*>(name), namelen);
  std::string text(reinterpret_cast<const char*>(value), valuelen);
  if (key == ":status") call->http_status = std::atoi(text.c_str());
  else if (key == "grpc-status") call->grpc_status = std::atoi(text.c_str());
  else if (key == "grpc-message") call->grpc_message = text;
  else if (key == "grpc-encoding") call->answer_encoding = text;
  return 0;
}

int on_data(nghttp2_session* session, uint8_t, int32_t stream, const uint8_t* data, size_t length, void* user) {
  Call* call = call_of(session, stream, static_cast<Connection*>(user));
  if (call) call->in.append(reinterpret_cast<const char*>(data), length);
  return 0;
}

int on_close(nghttp2_session* session, int32_t stream, uint32_t error, void* user) {
  Connection* c = static_cast<Connection*>(user);
  Call* call = call_of(session, stream, c);
  if (!call) return 0;
  c->open.erase(call);
  if (error == kRefusedStream) {  // HTTP/2: the server did not process it, so it may be sent again
    finish(c, call, kUnavailable, "the server refused the HTTP/2 stream without processing it (rst_stream "
                                  "REFUSED_STREAM)");
  } else if (error != 0) {
    finish(c, call, kUnavailable, "the server reset the HTTP/2 stream (rst_stream, error code " +
                                      std::to_string(error) + ")");
  } else if (call->grpc_status >= 0) {
    finish(c, call, call->grpc_status, std::move(call->grpc_message));
  } else if (call->http_status != 200) {
    int status = call->http_status == 401 ? kUnauthenticated : call->http_status == 403 ? kPermissionDenied
                                                                                          : kUnavailable;
    finish(c, call, status, "HTTP status " + std::to_string(call->http_status) + " without a gRPC status");
  } else {
    finish(c, call, kUnknown, "the answer ended without a gRPC status");
  }
  return 0;
}

int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != kNghttp2Goaway) return 0;
  const nghttp2_goaway& goaway = frame->goaway;  // e.g. gRPC's ENHANCE_YOUR_CALM (11) "too_many_pings"
  std::string text = "GOAWAY, error code " + std::to_string(goaway.error_code);
  if (goaway.opaque_data_len)
    text += ": " + std::string(reinterpret_cast<const char*>(goaway.opaque_data), goaway.opaque_data_len);
  static_cast<Connection*>(user)->goaway = text;
  return 0;
}

ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t* flags, nghttp2_data_source* source,
                  void*) {
  Call* call = static_cast<Call*>(source->ptr);
  size_t n = std::min(length, call->out.size() - call->offset);
  std::memcpy(buf, call->out.data() + call->offset, n);
  call->offset += n;
  if (call->offset == call->out.size()) {
    *flags |= kNghttp2DataFlagEof;
    std::string().swap(call->out);  // sent: its memory is not needed until the answer
    call->offset = 0;
  }
  return static_cast<ssize_t>(n);
}

nghttp2_nv header(const std::string& name, const std::string& value) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
                    kNghttp2FlagNone};
}

void submit(Connection* c, Call* call) {
  static const std::string method = ":method", post = "POST", scheme = ":scheme", http = "http", path = ":path",
                           authority = ":authority", type = "content-type", grpc = "application/grpc", te = "te",
                           trailers = "trailers", accept = "grpc-accept-encoding", accepted = "identity,deflate,gzip",
                           encoding = "grpc-encoding", names[] = {kEncodings[0], kEncodings[1], kEncodings[2]},
                           authorization = "authorization";
  nghttp2_nv headers[] = {header(method, post),         header(scheme, http),    header(path, c->path),
                          header(authority, c->authority), header(type, grpc), header(te, trailers),
                          header(accept, accepted),     header(encoding, names[call->encoding]),
                          header(authorization, call->authorization)};
  headers[8].flags = kNoIndex;
  nghttp2_data_provider body;
  body.source.ptr = call;
  body.read_callback = read_body;
  size_t count = call->encoding ? 8 : 7;  // grpc-encoding only on a compressed request
  if (!call->authorization.empty()) headers[count++] = headers[8];
  int32_t stream = nghttp2_submit_request(c->session, nullptr, headers, count, &body, call);
  if (stream < 0) {
    finish(c, call, kUnavailable, std::string("cannot start an HTTP/2 stream: ") + nghttp2_strerror(stream));
    return;
  }
  c->open.insert(call);
}

// Writes what nghttp2 has to send; false (and why) when the connection broke.
bool flush(Connection* c, std::string* why) {
  while (true) {
    if (!c->pending.empty()) {
      ssize_t n = send(c->fd, c->pending.data(), c->pending.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return true;  // the rest when the socket can take it
        *why = errno_text("writing to the server");
        return false;
      }
      c->pending.erase(0, size_t(n));
      if (!c->pending.empty()) return true;
    }
    const uint8_t* data = nullptr;
    ssize_t n = nghttp2_session_mem_send(c->session, &data);
    if (n < 0) {
      *why = std::string("HTTP/2: ") + nghttp2_strerror(int(n));
      return false;
    }
    if (n == 0) return true;
    c->pending.assign(reinterpret_cast<const char*>(data), size_t(n));
  }
}

// Reads what the server sent; false (and why) when the connection ended.
bool receive(Connection* c, std::vector<uint8_t>* buf, std::string* why) {
  while (true) {
    ssize_t n = recv(c->fd, buf->data(), buf->size(), 0);
    if (n > 0) {
      c->last_read = Clock::now();
      ssize_t used = nghttp2_session_mem_recv(c->session, buf->data(), size_t(n));
      if (used < 0) {
        *why = std::string("HTTP/2: ") + nghttp2_strerror(int(used));
        return false;
      }
      continue;
    }
    if (n == 0) {
      *why = "the server closed the connection (socket closed" + (c->goaway.empty() ? "" : " after " + c->goaway) + ")";
      return false;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    *why = errno_text("reading from the server");
    return false;
  }
}

int ms_until(Clock::time_point when, Clock::time_point now) {
  return when <= now ? 0 : int(std::chrono::ceil<std::chrono::milliseconds>(when - now).count());
}

// The keepalive's turn: sends a PING when the connection has been silent for ping_ms; false (and why) when one went
// unanswered for ping_timeout_ms. `wait_ms`: how long poll may sleep before the next turn (-1: no limit).
bool keepalive(Connection* c, int* wait_ms, std::string* why) {
  *wait_ms = -1;
  if (c->ping_ms <= 0) return true;
  Clock::time_point now = Clock::now();
  if (c->pinged && c->last_read >= c->ping_at) c->pinged = false;  // anything that arrived since answers it
  if (!c->pinged) {
    Clock::time_point due = c->last_read + std::chrono::milliseconds(c->ping_ms);
    if (now < due) {
      *wait_ms = ms_until(due, now);
      return true;
    }
    int rc = nghttp2_submit_ping(c->session, kNghttp2FlagNone, nullptr);
    if (rc != 0) {
      *why = std::string("keepalive: cannot send a PING: ") + nghttp2_strerror(rc);
      return false;
    }
    c->pinged = true;
    c->ping_at = now;
  }
  Clock::time_point dead = c->ping_at + std::chrono::milliseconds(c->ping_timeout_ms);
  if (now >= dead) {
    double silent = std::chrono::duration<double>(now - c->last_read).count();
    char text[200];
    std::snprintf(text, sizeof text,
                  "keepalive: no answer to an HTTP/2 PING within %.1f s (nothing received for %.1f s): the connection "
                  "went silent, as in a network partition", c->ping_timeout_ms / 1000.0, silent);
    *why = text;
    return false;
  }
  *wait_ms = ms_until(dead, now);
  return true;
}

void run(Connection* c) {
  std::vector<uint8_t> buf(1 << 16);
  std::string why;
  while (true) {
    std::deque<Call*> batch;
    bool closing;
    {
      std::lock_guard<std::mutex> lock(c->mu);
      batch.swap(c->queued);
      closing = c->closing;
    }
    for (Call* call : batch) submit(c, call);
    if (closing) {
      why = "the connection was closed by this client";
      break;
    }
    int wait_ms;
    if (!keepalive(c, &wait_ms, &why)) break;
    if (!flush(c, &why)) break;
    if (c->open.empty() && !nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session)) {
      why = "the server ended the connection (" + (c->goaway.empty() ? "GOAWAY" : c->goaway) + ")";
      break;
    }
    pollfd fds[2] = {{c->fd, short(POLLIN | (c->pending.empty() ? 0 : POLLOUT)), 0}, {c->wake, POLLIN, 0}};
    if (poll(fds, 2, wait_ms) < 0) {
      if (errno == EINTR) continue;
      why = errno_text("poll");
      break;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count;
      if (read(c->wake, &count, sizeof count) < 0 && errno != EAGAIN) {
        why = errno_text("eventfd");
        break;
      }
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !receive(c, &buf, &why)) break;
  }
  // every call still open or queued ends here, with the reason
  std::vector<Call*> left(c->open.begin(), c->open.end());
  c->open.clear();
  std::deque<Call*> queued;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->dead = true;
    queued.swap(c->queued);
  }
  c->stopped = true;
  for (Call* call : left) finish(c, call, kUnavailable, why);
  for (Call* call : queued) finish(c, call, kUnavailable, why);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->why = why;
    c->ended = true;
  }
  c->cv.notify_all();
}

// Wakes the I/O thread. A failed write can only mean the counter is full, i.e. a wake-up is already pending.
void wake(Connection* c) {
  uint64_t one = 1;
  if (write(c->wake, &one, sizeof one) < 0) return;
}

int connect_to(const char* host, int port, int timeout_ms, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host, service.c_str(), &hints, &found);
  if (rc != 0) {
    *why = std::string("cannot resolve ") + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int done = connect(fd, a->ai_addr, a->ai_addrlen);
    if (done < 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready = poll(&p, 1, timeout_ms);
      int error = 0;
      socklen_t size = sizeof error;
      if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0) done = 0;
      else errno = ready == 0 ? ETIMEDOUT : (error ? error : errno);
    }
    if (done == 0) break;
    *why = errno_text("connect");
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

SONIC_EXPORT void* sgt_open(const char* host, int port, const char* authority, const char* path, int timeout_ms,
                            int ping_ms, int ping_timeout_ms, char* error, size_t size) {
  std::string why;
  auto fail = [&](const std::string& text) -> void* {
    std::snprintf(error, size, "%s", text.c_str());
    return nullptr;
  };
  int fd = connect_to(host, port, timeout_ms, &why);
  if (fd < 0) return fail("failed to connect to " + std::string(authority) + ": " + why);
  auto* c = new Connection();
  c->fd = fd;
  c->authority = authority;
  c->path = path;
  c->ping_ms = ping_ms;
  c->ping_timeout_ms = ping_timeout_ms;
  c->last_read = Clock::now();
  c->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  nghttp2_session_callbacks* callbacks = nullptr;
  int rc = c->wake < 0 ? -1 : nghttp2_session_callbacks_new(&callbacks);
  if (rc == 0) {
    nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame);
    rc = nghttp2_session_client_new(&c->session, callbacks, c);
    nghttp2_session_callbacks_del(callbacks);
  }
  // no server push; the largest windows HTTP/2 allows, so an answer of any size flows without waiting on us
  nghttp2_settings_entry settings[] = {{kNghttp2SettingsEnablePush, 0},
                                       {kNghttp2SettingsInitialWindowSize, uint32_t(kNghttp2MaxWindowSize)}};
  if (rc == 0) rc = nghttp2_submit_settings(c->session, kNghttp2FlagNone, settings, 2);
  if (rc == 0) rc = nghttp2_session_set_local_window_size(c->session, kNghttp2FlagNone, 0, kNghttp2MaxWindowSize);
  if (rc != 0) {
    std::string text = c->wake < 0 ? errno_text("eventfd") : std::string("HTTP/2 session: ") + nghttp2_strerror(rc);
    if (c->session) nghttp2_session_del(c->session);
    if (c->wake >= 0) close(c->wake);
    close(fd);
    delete c;
    return fail(text);
  }
  c->io = std::thread(run, c);
  return c;
}

SONIC_EXPORT int sgt_send(void* connection, uint64_t tag, const char* message, size_t length, int encoding) {
  auto* c = static_cast<Connection*>(connection);
  if (length > 0xffffffffu) return -2;
  if (encoding < 0 || encoding > 2) return -3;
  auto* call = new Call();
  call->tag = tag;
  call->encoding = encoding;
  call->out.resize(5 + length);
  call->out[0] = encoding ? 1 : 0;  // gRPC's "compressed" flag
  for (int i = 0; i < 4; ++i) call->out[1 + i] = char((length >> (24 - 8 * i)) & 0xff);
  if (length) std::memcpy(&call->out[5], message, length);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->dead || c->closing) {
      delete call;
      return -1;
    }
    call->authorization = c->authorization;
    c->queued.push_back(call);
  }
  wake(c);
  return 0;
}

SONIC_EXPORT int sgt_wait(void* connection, int timeout_ms) {
  auto* c = static_cast<Connection*>(connection);
  std::unique_lock<std::mutex> lock(c->mu);
  c->taken.clear();
  c->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [c] { return !c->done.empty() || c->ended; });
  while (!c->done.empty()) {
    c->taken.push_back(std::move(c->done.front()));
    c->done.pop_front();
  }
  if (c->taken.empty() && c->ended) return -1;
  return int(c->taken.size());
}

SONIC_EXPORT int sgt_result(void* connection, int index, uint64_t* tag, int* status, const char** body,
                            size_t* body_length, const char** message, const char** encoding) {
  auto* c = static_cast<Connection*>(connection);
  if (index < 0 || size_t(index) >= c->taken.size()) return -1;
  const Done& done = c->taken[size_t(index)];
  *tag = done.tag;
  *status = done.status;
  *body = done.body.data();
  *body_length = done.body.size();
  *message = done.message.c_str();
  *encoding = done.encoding.c_str();
  return 0;
}

SONIC_EXPORT void sgt_close(void* connection) {
  auto* c = static_cast<Connection*>(connection);
  {
    std::lock_guard<std::mutex> lock(c->mu);
    c->closing = true;
  }
  wake(c);
}

SONIC_EXPORT const char* sgt_reason(void* connection) {
  auto* c = static_cast<Connection*>(connection);
  std::lock_guard<std::mutex> lock(c->mu);
  return c->ended ? c->why.c_str() : "";
}

SONIC_EXPORT void sgt_free(void* connection) {
  auto* c = static_cast<Connection*>(connection);
  sgt_close(c);
  if (c->io.joinable()) c->io.join();
  nghttp2_session_del(c->session);
  close(c->fd);
  close(c->wake);
  delete c;
}

SONIC_EXPORT void sgt_authorize(void* connection, const char* value) {
  auto* c = static_cast<Connection*>(connection);
  std::lock_guard<std::mutex> lock(c->mu);
  c->authorization = value ? value : "";
}

SONIC_EXPORT int sgt_version() { return 4; }
