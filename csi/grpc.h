/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small gRPC server for unary calls over HTTP/2 on a unix socket
 * (nghttp2 for HTTP/2, protobuf-c for the messages; docs/design.md, "CSI").
 *
 * One thread, one poll loop.  A call is answered when its request is
 * complete: the method is looked up by its HTTP/2 :path, the one
 * length-prefixed message is unpacked with the method's descriptor, the
 * handler runs and answers with grpc_reply() or grpc_fail().  Everything a
 * client sends is bounded: the message size, the header block, the streams
 * per connection, the connections, the time a request may take to arrive
 * and the time a connection may stay idle.  Whatever is malformed above the
 * HTTP/2 framing (which nghttp2 checks) gets a gRPC status, never a crash.
 */
#ifndef FV_CSI_GRPC_H
#define FV_CSI_GRPC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "fv/macro.h"

/* The gRPC status codes, as the gRPC project numbers them (its "status codes" document). */
enum grpc_code {
	GRPC_OK = 0,
	GRPC_CANCELLED = 1,
	GRPC_UNKNOWN = 2,
	GRPC_INVALID_ARGUMENT = 3,
	GRPC_DEADLINE_EXCEEDED = 4,
	GRPC_NOT_FOUND = 5,
	GRPC_ALREADY_EXISTS = 6,
	GRPC_PERMISSION_DENIED = 7,
	GRPC_RESOURCE_EXHAUSTED = 8,
	GRPC_FAILED_PRECONDITION = 9,
	GRPC_ABORTED = 10,
	GRPC_OUT_OF_RANGE = 11,
	GRPC_UNIMPLEMENTED = 12,
	GRPC_INTERNAL = 13,
	GRPC_UNAVAILABLE = 14,
	GRPC_DATA_LOSS = 15,
	GRPC_UNAUTHENTICATED = 16,
};

/* The bounds (grpc.c has the values; docs/design.md, "CSI"). */
#define GRPC_MAX_MESSAGE (1u << 20)	  /* one request message, bytes */
#define GRPC_MAX_BUFFERED (16u << 20)	  /* request bytes of all calls together */
#define GRPC_MAX_STREAMS 8		  /* concurrent calls per connection */
#define GRPC_MAX_CONNS 16		  /* connections at once; then the idlest without a call goes */
#define GRPC_MAX_HEADERS (16u << 10)	  /* a request's header block, bytes */
#define GRPC_REQUEST_MS (30u * 1000)	  /* a request must arrive whole within this */
#define GRPC_STALL_MS (30u * 1000)	  /* a connection with work pending must move within this */
#define GRPC_IDLE_MS (10u * 60 * 1000)	  /* a connection with nothing to do is closed after this */

struct grpc_call;

/*
 * A method: its path ("/csi.v1.Identity/Probe"), its request type, and the
 * handler, which answers exactly once with grpc_reply() or grpc_fail() (a
 * handler that does neither is answered INTERNAL).
 */
struct grpc_method {
	const char *path;
	const ProtobufCMessageDescriptor *request;
	void (*run)(struct grpc_call *call, const ProtobufCMessage *req);
	bool look;	/* changes nothing: not logged when it succeeds (kubelet polls these) */
};

/* Answer @call with the message @resp (packed at once: it may live on the stack). */
void grpc_reply(struct grpc_call *call, const ProtobufCMessage *resp);

/* Answer @call with the error @code and a printf-style message; returns @code. */
int grpc_fail(struct grpc_call *call, enum grpc_code code, const char *fmt, ...) _printf_(3, 4);

/* The method being answered ("/csi.v1.Node/NodeGetInfo"). */
const char *grpc_call_method(const struct grpc_call *call);

/*
 * grpc_listen_unix() - listen on the unix socket @path, mode 0600.  A stale
 * socket file (nobody accepts on it) is replaced; a live one is -EADDRINUSE.
 * Returns the listening fd or -errno.
 */
int grpc_listen_unix(const char *path);

/*
 * grpc_serve() - serve the @n methods on the listening socket @lfd until
 * *@stop is set (by a signal handler).  Returns 0 or -errno.
 */
int grpc_serve(int lfd, const struct grpc_method *methods, size_t n,
	       const volatile sig_atomic_t *stop);

/*
 * Percent-encode @msg for the grpc-message trailer (gRPC over HTTP/2: bytes
 * outside 0x20..0x7e, and '%', as %XX) into @out, cut at @size.  (grpc.c)
 */
void grpc_percent_encode(const char *msg, char *out, size_t size);

#endif
