package cm

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// TestRDMACMDecodesInTshark records a connect, an accept, a reject and a
// disconnect, and has tshark decode them: every message must be the IB CM
// message it claims, with the rdma_cm service ID and private data
// recognised, and nothing malformed.
func TestRDMACMDecodesInTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("tshark is not installed; .ci/run installs it")
		}
		t.Skip("tshark not installed (apt-get install tshark); CI runs this check")
	}
	path := filepath.Join(t.TempDir(), "cm.pcap")
	a := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0", PcapPath: path}, Config{ResponseTimeout: 5 * time.Second})
	b := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{ResponseTimeout: 5 * time.Second})
	l, _ := b.m.Listen(0, 0)
	ctx := ctxFor(t, 10*time.Second)
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Accept(b.newQP(t), Params{PrivateData: []byte("welcome")})
		}
		if r, err := l.Accept(ctx); err == nil {
			r.Reject(0, []byte("full"))
		}
	}()
	id, err := a.m.Connect(ctx, a.newQP(t), b.dev.LocalAddr(), Params{PrivateData: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.m.Connect(ctx, a.newQP(t), b.dev.LocalAddr(), Params{}); err == nil {
		t.Fatal("the second connect was not rejected")
	}
	id.Disconnect()
	waitFor(t, "the DREP", func() bool { return a.m.Stats().Connections == 0 })
	a.m.Close()
	a.dev.Close() // flushes the capture

	args := []string{"-n", "-r", path, "-d", fmt.Sprintf("udp.port==%d,infiniband", b.dev.LocalAddr().Port())}
	out, err := exec.Command(tshark, append(args, "-T", "fields", "-e", "_ws.col.Info")...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	want := []string{"ConnectRequest", "ConnectReply", "ReadyToUse", "ConnectRequest", "ConnectReject", "DisconnectRequest", "DisconnectReply"}
	got := strings.Fields(strings.ReplaceAll(string(out), "CM:", ""))
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("tshark sees %q, want %q", got, want)
	}
	ip, err := exec.Command(tshark, append(args, "-Y", "infiniband.cm.req", "-V")...).Output()
	if err != nil || !strings.Contains(string(ip), "IP CM Private Data") || !strings.Contains(string(ip), "IP CM ServiceID") {
		t.Fatalf("tshark does not see rdma_cm's header in the REQ (%v)", err)
	}
	bad, err := exec.Command(tshark, append(args, "-Y", "_ws.malformed || _ws.expert.severity >= 8388608")...).Output()
	if err != nil || len(strings.TrimSpace(string(bad))) > 0 {
		t.Fatalf("tshark flags frames (%v):\n%s", err, bad)
	}
}
