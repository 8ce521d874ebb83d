// Command csi-node-registrar registers a CSI node plugin with kubelet, as node-driver-registrar
// does (the same flags for what the lane uses), for the cluster lane only: node-driver-registrar's
// module is not served by the Go module proxy this project reaches. It asks the plugin's
// Identity service for its name (GetPluginInfo, retried until --timeout), then serves kubelet's
// plugin registration service (pluginregistration.v1: GetInfo, NotifyRegistrationStatus) on
// <registration-dir>/<name>-reg.sock, where kubelet's plugin watcher finds it. It removes its
// socket on SIGTERM/SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type server struct {
	registerapi.UnimplementedRegistrationServer
	name, endpoint string
}

func (s *server) GetInfo(ctx context.Context, req *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	log.Printf("GetInfo: %s at %s", s.name, s.endpoint)
	return &registerapi.PluginInfo{
		Type:              registerapi.CSIPlugin,
		Name:              s.name,
		Endpoint:          s.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (s *server) NotifyRegistrationStatus(ctx context.Context, st *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	if st.PluginRegistered {
		log.Printf("registered with kubelet: %s", s.name)
	} else {
		log.Printf("kubelet refused the registration of %s: %s", s.name, st.Error)
	}
	return &registerapi.RegistrationStatusResponse{}, nil
}

func pluginName(addr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := csi.NewIdentityClient(conn).GetPluginInfo(cctx, &csi.GetPluginInfoRequest{})
		ccancel()
		if err == nil && r.GetName() != "" {
			return r.GetName(), nil
		}
		log.Printf("GetPluginInfo on %s: %v (retrying)", addr, err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no plugin name from %s within %s: %v", addr, timeout, err)
		case <-time.After(time.Second):
		}
	}
}

func main() {
	csiAddr := flag.String("csi-address", "/csi/csi.sock", "the CSI plugin's socket, as this container sees it")
	kubeletPath := flag.String("kubelet-registration-path", "", "the CSI plugin's socket, as kubelet on the host sees it")
	regDir := flag.String("plugin-registration-path", "/registration", "kubelet's plugins_registry directory, as this container sees it")
	timeout := flag.Duration("timeout", 2*time.Minute, "how long to wait for the plugin's name")
	flag.Int("v", 0, "log verbosity (accepted for node-driver-registrar's command line)")
	flag.Parse()
	if *kubeletPath == "" {
		log.Fatal("--kubelet-registration-path is required")
	}
	name, err := pluginName(*csiAddr, *timeout)
	if err != nil {
		log.Fatal(err)
	}
	sock := filepath.Join(*regDir, name+"-reg.sock")
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		log.Fatalf("remove stale %s: %v", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("listen on %s: %v", sock, err)
	}
	g := grpc.NewServer()
	registerapi.RegisterRegistrationServer(g, &server{name: name, endpoint: *kubeletPath})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		s := <-sig
		log.Printf("%v: removing %s", s, sock)
		g.Stop()
		os.Remove(sock)
		os.Exit(0)
	}()
	log.Printf("serving registration of %s (endpoint %s) on %s", name, *kubeletPath, sock)
	if err := g.Serve(l); err != nil {
		log.Fatal(err)
	}
}
