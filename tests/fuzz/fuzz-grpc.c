/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer targets at flexvol-csi's wire (issue 37 point 5): the bytes of
 * one client connection through the endpoint's own code (csi/grpc.c,
 * included here): the nghttp2 session and our callbacks, the gRPC frame
 * checks, the NUL-in-strings walk, protobuf-c's unpack with the method's
 * descriptor, the dispatch, the answer (packed, percent-encoded), the log
 * line (escaped) and the request deadline.  Built once per mode with
 * -DFUZZ_GRPC='"wire"' or '"request"':
 *
 *   wire     the input is what the client sends, from its preface on; its
 *            first byte is a quarter of the size of the pieces it arrives in
 *            (0: whole; at least 4 bytes: frames cut, not a syscall per byte)
 *   request  byte 0 picks a method (of every CSI service), byte 1 the piece
 *            size likewise; the rest is the request message, which the target frames
 *            as a well-formed call (preface, SETTINGS, HEADERS, one DATA with
 *            the 5-byte prefix): protobuf and the walk, with HTTP/2 out of
 *            the mutator's way
 *
 * The op layer is stubbed at its boundary: every method of the CSI services
 * (Identity, Node, Controller, GroupController, SnapshotMetadata), with the
 * real request descriptors, has a handler that reads the request (its
 * packed size walks every field) and answers by that: the request itself,
 * an error quoting its first string field (as the services quote volume IDs
 * and paths), or nothing (INTERNAL); no mount, no file.  Handlers run on
 * the loop thread here (grpc_pool.inline_calls): the threads are run-node's and
 * TSan's to test, not the wire's.  After each input every call must be
 * freed and the request bytes' bound back at 0.
 */
#include <stdlib.h>
#include <sys/socket.h>

#include "../../csi/grpc.c"
#include "../../csi/grpc-calls.c"
#include "csi.pb-c.h"

#ifndef FUZZ_GRPC
#error "build with -DFUZZ_GRPC='\"wire\"' (or request)"
#endif

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct grpc_method methods[128];
static char paths[128][128];
static size_t nmethods;
static bool request_mode;

/* The first string field of @m that is set, or "". */
static const char *first_string(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;

	for (unsigned int i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *s;

		if (f->type != PROTOBUF_C_TYPE_STRING || f->label == PROTOBUF_C_LABEL_REPEATED)
			continue;
		/* a member of a oneof that is not the one set holds another type's bytes */
		if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
		    *(const uint32_t *)((const char *)m + f->quantifier_offset) != f->id)
			continue;
		s = *(char *const *)((const char *)m + f->offset);
		if (s && *s)
			return s;
	}
	return "";
}

static void stub(struct grpc_call *call, const ProtobufCMessage *req)
{
	size_t n = protobuf_c_message_get_packed_size(req);

	switch (n % 3) {
	case 0:
		grpc_reply(call, req);
		grpc_fail(call, GRPC_INTERNAL, "a second answer"); /* ignored: one per call */
		break;
	case 1:
		grpc_fail(call, GRPC_NOT_FOUND, "%s: no volume has the ID '%s'",
			  grpc_call_method(call), first_string(req));
		break;
	default:
		break; /* no answer: the endpoint's INTERNAL */
	}
}

static void add_service(const ProtobufCServiceDescriptor *s)
{
	for (unsigned int i = 0; i < s->n_methods && nmethods < ARRAY_SIZE(methods); i++) {
		snprintf(paths[nmethods], sizeof(paths[nmethods]), "/%s/%s", s->name,
			 s->methods[i].name);
		methods[nmethods] = (struct grpc_method){ .path = paths[nmethods],
							  .request = s->methods[i].input,
							  .run = stub, .look = nmethods % 2 };
		nmethods++;
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	add_service(&csi__v1__identity__descriptor);
	add_service(&csi__v1__node__descriptor);
	add_service(&csi__v1__controller__descriptor);
	add_service(&csi__v1__group_controller__descriptor);
	add_service(&csi__v1__snapshot_metadata__descriptor);
	request_mode = streq(FUZZ_GRPC, "request");
	grpc_log_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	if (grpc_log_fd < 0 || grpc_pool_init(methods, nmethods) < 0)
		abort();
	grpc_pool.inline_calls = true;
	signal(SIGPIPE, SIG_IGN);
	return 0;
}

/* Read and drop what the endpoint wrote to the client. */
static void drain(int fd)
{
	char buf[65536];

	while (read(fd, buf, sizeof(buf)) > 0)
		;
}

/* A literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2). */
static size_t hpack_literal(uint8_t *out, const char *name, const char *value)
{
	size_t o = 0, n = strlen(name), v = strlen(value);

	out[o++] = 0;
	out[o++] = (uint8_t)n; /* < 127: one byte */
	memcpy(out + o, name, n);
	o += n;
	out[o++] = (uint8_t)v;
	memcpy(out + o, value, v);
	return o + v;
}

static size_t h2_frame(uint8_t *out, uint8_t type, uint8_t flags, uint32_t stream,
		       const uint8_t *payload, size_t n)
{
	out[0] = (uint8_t)(n >> 16);
	out[1] = (uint8_t)(n >> 8);
	out[2] = (uint8_t)n;
	out[3] = type;
	out[4] = flags;
	out[5] = (uint8_t)(stream >> 24);
	out[6] = (uint8_t)(stream >> 16);
	out[7] = (uint8_t)(stream >> 8);
	out[8] = (uint8_t)stream;
	if (n)
		memcpy(out + 9, payload, n);
	return 9 + n;
}

/* The request of @path with message @msg as a client would send it: the bytes, malloc'd. */
static uint8_t *frame_call(const char *path, const uint8_t *msg, size_t n, size_t *len)
{
	static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
	uint8_t hdr[512], *body = malloc(5 + n), *out = malloc(sizeof(preface) + 9 + 9 + 512 + 9 + 5 + n);
	size_t h = 0, o = 0;

	if (!body || !out)
		abort();
	h += hpack_literal(hdr + h, ":method", "POST");
	h += hpack_literal(hdr + h, ":scheme", "http");
	h += hpack_literal(hdr + h, ":path", path);
	h += hpack_literal(hdr + h, ":authority", "localhost");
	h += hpack_literal(hdr + h, "content-type", "application/grpc");
	h += hpack_literal(hdr + h, "te", "trailers");
	body[0] = 0;
	body[1] = (uint8_t)(n >> 24);
	body[2] = (uint8_t)(n >> 16);
	body[3] = (uint8_t)(n >> 8);
	body[4] = (uint8_t)n;
	memcpy(body + 5, msg, n);
	memcpy(out, preface, sizeof(preface) - 1);
	o = sizeof(preface) - 1;
	o += h2_frame(out + o, NGHTTP2_SETTINGS, 0, 0, NULL, 0);
	o += h2_frame(out + o, NGHTTP2_HEADERS, NGHTTP2_FLAG_END_HEADERS, 1, hdr, h);
	o += h2_frame(out + o, NGHTTP2_DATA, NGHTTP2_FLAG_END_STREAM, 1, body, 5 + n);
	free(body);
	*len = o;
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *in = data;
	uint8_t *framed = NULL;
	size_t piece, len, off = 0;
	struct conn *k;
	int sv[2];

	if (size < (request_mode ? 2 : 1))
		return 0;
	if (request_mode) {
		framed = frame_call(methods[data[0] % nmethods].path, data + 2, size - 2, &len);
		in = framed;
		piece = (size_t)data[1] * 4;
	} else {
		piece = (size_t)data[0] * 4;
		in = data + 1;
		len = size - 1;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		abort();
	k = conn_new(sv[0], methods, nmethods);
	if (!k)
		abort();
	conn_io(k, 0);
	/* the bytes arrive in pieces (a client's writes, the socket's reads), each read at once */
	while (off < len && !k->dead) {
		size_t n = piece && piece < len - off ? piece : len - off;
		ssize_t w = write(sv[1], in + off, n);

		if (w > 0)
			off += (size_t)w;
		conn_io(k, POLLIN);
		drain(sv[1]);
	}
	shutdown(sv[1], SHUT_WR);
	for (int i = 0; i < 4 && !k->dead; i++) {
		conn_io(k, POLLIN);
		drain(sv[1]);
	}
	/* what is still arriving meets its deadline; what was answered goes out */
	if (!k->dead) {
		conn_timers(k, fv_now_ms() + GRPC_REQUEST_MS);
		if (!k->dead)
			conn_io(k, 0);
		drain(sv[1]);
	}
	conn_free(k);
	close(sv[1]);
	free(framed);
	/* every call freed, its bytes given back */
	if (grpc_buffered != 0 || grpc_pool.waiting != 0)
		abort();
	return 0;
}
