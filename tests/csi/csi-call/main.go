// csi-call: one CSI call against an endpoint, for the tests in tests/csi (run-node).
//
//	csi-call -endpoint unix:///path /csi.v1.Node/NodeStageVolume '{"volumeId": ...}'
//	    the request in protobuf JSON; prints the answer as JSON, or "code=N message=..."
//	    on stderr with exit status 100+N for a gRPC error
//	csi-call -endpoint unix:///path -raw HEX|-raw-file F [-content-type T] /csi.v1.Identity/Probe
//	    sends the HTTP/2 request body (HEX, or the bytes of file F) as it is (any framing,
//	    malformed on purpose); prints "http=S grpc-status=N grpc-message=M"; with -stall the
//	    request never ends: the body stays open after those bytes
//	csi-call -endpoint unix:///path -script F
//	    the calls of file F (a JSON list of [METHOD, REQUEST-JSON-OBJECT]) in order over one
//	    connection, as a CO makes them (make bench); prints a JSON list of the milliseconds
//	    each took, from the request sent to the answer read; a call that fails stops it
//	    (its "code=N message=..." on stderr, exit status 100+N)
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	_ "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

func die(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "csi-call: "+format+"\n", a...)
	os.Exit(2)
}

func socketPath(endpoint string) string {
	for _, p := range []string{"unix://", "unix:"} {
		if strings.HasPrefix(endpoint, p) {
			return strings.TrimPrefix(endpoint, p)
		}
	}
	return endpoint
}

// stalled: a request body that gives its bytes, then blocks until the call ends or the
// transport closes it (the server answered).
type stalled struct {
	r      io.Reader
	done   <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (s *stalled) Read(p []byte) (int, error) {
	if n, err := s.r.Read(p); err != io.EOF {
		return n, err
	}
	select {
	case <-s.done:
		return 0, io.ErrUnexpectedEOF
	case <-s.closed: // answered already
		return 0, io.EOF
	}
}

func (s *stalled) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

func raw(sock, method string, b []byte, ctype string, stall bool, timeout time.Duration) {
	tr := &http2.Transport{AllowHTTP: true,
		DialTLSContext: func(ctx context.Context, network, addr string, _ *tls.Config) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var body io.Reader = bytes.NewReader(b)
	if stall {
		body = &stalled{r: body, done: ctx.Done(), closed: make(chan struct{})}
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://localhost"+method, body)
	req.Header.Set("content-type", ctype)
	req.Header.Set("te", "trailers")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		die("%v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	st, msg := resp.Trailer.Get("grpc-status"), resp.Trailer.Get("grpc-message")
	if st == "" { // trailers-only
		st, msg = resp.Header.Get("grpc-status"), resp.Header.Get("grpc-message")
	}
	fmt.Printf("http=%d grpc-status=%s grpc-message=%s\n", resp.StatusCode, st, msg)
}

// messages: the request and answer messages of METHOD ("/csi.v1.Node/NodeStageVolume").
func messages(method string) (*dynamicpb.Message, *dynamicpb.Message) {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		die("unknown method %s: %v", method, err)
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		die("%s is no method", method)
	}
	return dynamicpb.NewMessage(md.Input()), dynamicpb.NewMessage(md.Output())
}

// script: the calls of file @f over one connection, each timed.
func script(sock, f string, timeout time.Duration) {
	b, err := os.ReadFile(f)
	if err != nil {
		die("-script: %v", err)
	}
	var calls [][2]json.RawMessage
	if err := json.Unmarshal(b, &calls); err != nil {
		die("-script: %v", err)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die("%v", err)
	}
	defer conn.Close()
	ms := make([]float64, 0, len(calls))
	for _, c := range calls {
		var method string
		if err := json.Unmarshal(c[0], &method); err != nil {
			die("-script: %v", err)
		}
		in, out := messages(method)
		if err := protojson.Unmarshal(c[1], in); err != nil {
			die("-script: %s: %v", method, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		t0 := time.Now()
		err := conn.Invoke(ctx, method, in, out)
		took := time.Since(t0)
		cancel()
		if err != nil {
			s := status.Convert(err)
			fmt.Fprintf(os.Stderr, "%s: code=%d message=%s\n", method, int(s.Code()), s.Message())
			os.Exit(100 + int(s.Code()))
		}
		ms = append(ms, float64(took.Microseconds())/1000)
	}
	j, _ := json.Marshal(ms)
	fmt.Println(string(j))
}

// isSet: was flag @name given (an empty -raw "" is an empty body)?
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}

func main() {
	endpoint := flag.String("endpoint", "", "the CSI endpoint (unix:///path)")
	rawBody := flag.String("raw", "", "send this request body (hex) as it is")
	rawFile := flag.String("raw-file", "", "send the bytes of this file as the request body")
	ctype := flag.String("content-type", "application/grpc", "content-type of a -raw request")
	stall := flag.Bool("stall", false, "with -raw: keep the request open after its bytes")
	timeout := flag.Duration("timeout", 60*time.Second, "deadline of the call")
	scriptFile := flag.String("script", "", "make the calls of this file, timed")
	flag.Parse()
	if *endpoint != "" && *scriptFile != "" {
		script(socketPath(*endpoint), *scriptFile, *timeout)
		return
	}
	if *endpoint == "" || flag.NArg() < 1 {
		die("usage: csi-call -endpoint unix:///path METHOD [JSON]")
	}
	method := flag.Arg(0)
	sock := socketPath(*endpoint)
	if *rawFile != "" {
		b, err := os.ReadFile(*rawFile)
		if err != nil {
			die("-raw-file: %v", err)
		}
		raw(sock, method, b, *ctype, *stall, *timeout)
		return
	}
	if isSet("raw") {
		b, err := hex.DecodeString(*rawBody)
		if err != nil {
			die("-raw: %v", err)
		}
		raw(sock, method, b, *ctype, *stall, *timeout)
		return
	}
	in, out := messages(method)
	if flag.NArg() > 1 {
		if err := protojson.Unmarshal([]byte(flag.Arg(1)), in); err != nil {
			die("request: %v", err)
		}
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die("%v", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := conn.Invoke(ctx, method, in, out); err != nil {
		s := status.Convert(err)
		fmt.Fprintf(os.Stderr, "code=%d message=%s\n", int(s.Code()), s.Message())
		os.Exit(100 + int(s.Code()))
	}
	j, _ := protojson.MarshalOptions{EmitUnpopulated: false}.Marshal(out)
	if u := unknown(out.GetUnknown()); u != nil {
		// fields this client's spec no longer has (v1.13 removed NodeGetVolumeStats'
		// volume_condition, which flexvol-csi's v1.12 spec answers): by number
		var m map[string]any
		json.Unmarshal(j, &m)
		m["unknownFields"] = u
		j, _ = json.Marshal(m)
	}
	fmt.Println(string(j))
}

// unknown: the unknown fields @b of a message as {number: value}, nested messages decoded
// where their bytes parse as one (else a string), nil when there are none.
func unknown(b []byte) map[string]any {
	if len(b) == 0 {
		return nil
	}
	out := map[string]any{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		var v any
		switch typ {
		case protowire.VarintType:
			x, k := protowire.ConsumeVarint(b)
			v, n = x, k
		case protowire.BytesType:
			x, k := protowire.ConsumeBytes(b)
			if sub := unknown(x); sub != nil {
				v = sub
			} else {
				v = string(x)
			}
			n = k
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil
		}
		b = b[n:]
		out[fmt.Sprint(num)] = v
	}
	return out
}
