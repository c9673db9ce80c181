package plugintest

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Connect serves impl in this process exactly as ServeTransport serves it
// in a plugin process (the same gRPC server, the same fd socket, the same
// lanes), over an in-memory gRPC connection, and returns the host's client
// for it, with the fd socket attached. It needs no binary, so a contract
// test of a Transport, or of the conversion between the host's calls and
// the Transport's, runs in milliseconds. The test's cleanup closes it all.
//
// protocol is the version the server says it serves (0: the SDK's).
func Connect(t testing.TB, impl sdk.Transport, protocol int) *pluginclient.Client {
	t.Helper()
	hostEnd, pluginEnd, err := shm.Socketpair()
	if err != nil {
		t.Fatalf("connect: fd socket: %v", err)
	}
	sender, err := shm.NewFDSender(hostEnd)
	if err != nil {
		t.Fatalf("connect: fd socket: %v", err)
	}
	recv, err := shm.NewFDReceiver(pluginEnd)
	if err != nil {
		t.Fatalf("connect: fd socket: %v", err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	tp := &sdk.TransportPlugin{Impl: impl, FDs: recv, Protocol: protocol}
	if err := tp.GRPCServer(nil, srv); err != nil {
		t.Fatalf("connect: %v", err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///plugintest",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		conn.Close()
		// Stop what a host left running (lanes, mappings), as the plugin
		// process does when its host goes away.
		ctx, cancel := context.WithTimeout(context.Background(), completionWait)
		defer cancel()
		if err := tp.Stop(ctx); err != nil {
			t.Errorf("connect: stop at cleanup: %v", err)
		}
		srv.Stop()
		<-served
		sender.Close()
		recv.Close()
	})
	return pluginclient.New(conn, sender)
}
