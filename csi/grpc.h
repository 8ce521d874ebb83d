/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A small gRPC server for unary calls over HTTP/2 on a unix socket
 * (nghttp2 for HTTP/2, protobuf-c for the messages; docs/design.md, "CSI").
 *
 * One I/O thread, one poll loop, owns every connection and nghttp2 session
 * (a session is not thread-safe).  A call is taken when its request is
 * complete: the method is looked up by its HTTP/2 :path, the one
 * length-prefixed message is checked and unpacked with the method's
 * descriptor, all on the loop; then the handler runs on a thread of its own
 * and answers with grpc_reply() or grpc_fail(); the loop is woken (an
 * eventfd), takes the answer and submits it.  Calls for different volumes
 * thus run at once (the op layer's file locks order those of one volume,
 * across processes too), and a call that blocks (a mkfs, a mount on a dead
 * server) holds up nobody else: calls that only look (Probe, capabilities,
 * stats) have threads of their own.  Everything a client sends is bounded:
 * the message size, the header block, the streams per connection, the
 * connections, the calls waiting, the time a request may take to arrive and
 * the time a connection may stay idle.  Whatever is malformed above the
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

/*
 * The bounds (docs/design.md, "The gRPC libraries: nghttp2 and protobuf-c, our own
 * framing").  Why these numbers:
 *
 * GRPC_WORKERS: calls that change something (stage, publish, create...) at
 * once, each on its own thread.  Each may run a helper (mkfs, iscsiadm,
 * mount.nfs) and hold a device; 8 covers a node's burst of pods starting
 * on 2 cores without a mkfs storm.  More wait in turn (GRPC_MAX_WAITING).
 *
 * GRPC_LOOKERS, GRPC_LOOK_PER_METHOD: calls that only look (Probe,
 * GetPluginInfo, the capabilities, NodeGetInfo, NodeGetVolumeStats,
 * GetCapacity...) have threads of their own, so they never wait behind the
 * calls above.  A statvfs can still block on a dead server (GetCapacity of
 * the nfs controller's share): one method holds at most 4 of the 16, so a
 * method stuck that way leaves the others, Probe first, their threads.
 *
 * GRPC_MAX_WAITING: calls taken but without a thread yet; more are answered
 * RESOURCE_EXHAUSTED at once (their bytes count in GRPC_MAX_BUFFERED too).
 *
 * GRPC_MAX_CONNS, GRPC_BACKLOG: kubelet keeps one connection per plugin and
 * the sidecars one each; 128 leaves room for bursts of short-lived clients
 * (64 at once are all served) at some 60 KiB of nghttp2 state each, and fds
 * to spare under the usual limit of 1024.  When every slot is taken, the
 * connection without a call that was idle longest goes; else one whose
 * request is still arriving (or whose answer waits for its reader) and that
 * has been silent GRPC_EVICT_MS: a client that stalls cannot lock anybody
 * out.  A connection with a call in a handler is never closed.  The listen
 * backlog holds as many as the slots, so a burst is accepted, not refused.
 *
 * GRPC_DRAIN_MS: after SIGTERM, calls in handlers have this long to finish
 * and be answered (kubelet's default grace is 30 s before SIGKILL); calls
 * not started are answered UNAVAILABLE.
 */
#define GRPC_MAX_MESSAGE (1u << 20)	  /* one request message, bytes */
#define GRPC_MAX_BUFFERED (16u << 20)	  /* request bytes of all calls together, until answered */
#define GRPC_MAX_STREAMS 32		  /* concurrent calls per connection */
#define GRPC_MAX_CONNS 128		  /* connections at once */
#define GRPC_BACKLOG GRPC_MAX_CONNS	  /* connections not yet accepted */
#define GRPC_WORKERS 8			  /* threads for calls that change something */
#define GRPC_LOOKERS 16			  /* threads for calls that only look */
#define GRPC_LOOK_PER_METHOD 4		  /* ...of which one method may hold */
#define GRPC_MAX_WAITING 256		  /* calls waiting for a thread */
#define GRPC_MAX_HEADERS (16u << 10)	  /* a request's header block, bytes */
#define GRPC_REQUEST_MS (30u * 1000)	  /* a request must arrive whole within this */
#define GRPC_STALL_MS (30u * 1000)	  /* a connection with bytes to move must move within this */
#define GRPC_EVICT_MS 1000u		  /* silent this long, a connection without a running call
					     may give way to a new one (all slots taken) */
#define GRPC_IDLE_MS (10u * 60 * 1000)	  /* a connection with nothing to do is closed after this */
#define GRPC_DRAIN_MS (25u * 1000)	  /* SIGTERM: calls in handlers finish within this */
#define GRPC_THREAD_STACK (4u << 20)	  /* a handler thread's stack (virtual; touched pages only) */

struct grpc_call;

/*
 * A method: its path ("/csi.v1.Identity/Probe"), its request type, and the
 * handler, which answers exactly once with grpc_reply() or grpc_fail() (a
 * handler that does neither is answered INTERNAL).  Handlers run on threads,
 * several at once: what they share must be thread-safe (the op layer is).
 */
struct grpc_method {
	const char *path;
	const ProtobufCMessageDescriptor *request;
	void (*run)(struct grpc_call *call, const ProtobufCMessage *req);
	bool look;	/* changes nothing: not logged when it succeeds (kubelet polls these), and
			   run on the threads kept for such calls (GRPC_LOOKERS) */
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
 * *@stop is set (by a signal handler of the calling thread; the handler
 * threads block the usual signals).  Then the calls in handlers finish
 * (GRPC_DRAIN_MS at most) and their answers go out.  Returns 0 or -errno.
 */
int grpc_serve(int lfd, const struct grpc_method *methods, size_t n,
	       const volatile sig_atomic_t *stop);

/*
 * Percent-encode @msg for the grpc-message trailer (gRPC over HTTP/2: bytes
 * outside 0x20..0x7e, and '%', as %XX) into @out, cut at @size.  (grpc.c)
 */
void grpc_percent_encode(const char *msg, char *out, size_t size);

/*
 * Escape @s for the endpoint's log line into @out, cut at @size (at a whole
 * escape): a backslash as \\, newline, carriage return and tab as \n, \r,
 * \t, every other byte outside 0x20..0x7e as \xNN (lower-case hex).  The
 * line stays printable ASCII: a request's bytes can forge no line, move no
 * cursor, turn no text around, and are all there to read.  Returns the
 * length.
 */
size_t grpc_log_escape(const char *s, char *out, size_t size);

#endif
