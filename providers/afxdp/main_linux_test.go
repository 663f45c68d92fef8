package afxdp_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"vroce.dev/internal/testkit/netnstest"
	"vroce.dev/providers/afxdp"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv("AFXDP_TEST_CHILD"); spec != "" {
		holdInterface(spec)
	}
	if spec := os.Getenv("AFXDP_TEST_UNPRIVILEGED"); spec != "" {
		openUnprivileged(spec)
	}
	goleak.VerifyTestMain(m)
}

// holdInterface is the process TestKilledProcessLeavesNothing kills: it
// opens a device in namespace,interface,address and waits to die.
func holdInterface(spec string) {
	f := strings.Split(spec, ",")
	fail := func(err error) {
		fmt.Println(err)
		os.Exit(1)
	}
	if _, err := netnstest.Enter(f[0]); err != nil {
		fail(err)
	}
	p, err := afxdp.Open(f[2], afxdp.Options{Iface: f[1]})
	if err != nil {
		fail(err)
	}
	if _, err := vroce.OpenWithProvider(p, vroce.Config{}); err != nil {
		fail(err)
	}
	fmt.Println("ready")
	select {}
}

// openUnprivileged enters namespace,interface, gives up root and tries to
// open a device there, printing the error it gets.
func openUnprivileged(spec string) {
	f := strings.Split(spec, ",")
	if _, err := netnstest.Enter(f[0]); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if err := syscall.Setgid(65534); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	if err := syscall.Setuid(65534); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	_, err := afxdp.Open("", afxdp.Options{Iface: f[1]})
	var pe *afxdp.PrivilegeError
	fmt.Printf("%v\n%v\n", errors.As(err, &pe), err)
	os.Exit(0)
}
