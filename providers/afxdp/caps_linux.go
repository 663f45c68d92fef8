package afxdp

import (
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// PrivilegeError says which capabilities the process lacks to run an
// AF_XDP device.
type PrivilegeError struct {
	Missing []string
}

func (e *PrivilegeError) Error() string {
	return "afxdp: missing " + strings.Join(e.Missing, ", ") + ": run as root or grant them (setcap cap_net_raw,cap_net_admin,cap_bpf+ep PROGRAM)"
}

// checkPrivileges names the capabilities Open will need and the process
// lacks: CAP_NET_RAW for the socket, CAP_NET_ADMIN to attach the program,
// CAP_BPF (or, on kernels before 5.8, CAP_SYS_ADMIN) to load it.
func checkPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, (*unix.CapUserData)(unsafe.Pointer(&data[0]))); err != nil {
		return nil // cannot tell: let the operations themselves say
	}
	has := func(c int) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	var missing []string
	if !has(unix.CAP_NET_RAW) {
		missing = append(missing, "CAP_NET_RAW")
	}
	if !has(unix.CAP_NET_ADMIN) {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if !has(unix.CAP_BPF) && !has(unix.CAP_SYS_ADMIN) {
		missing = append(missing, "CAP_BPF")
	}
	if len(missing) > 0 {
		return &PrivilegeError{Missing: missing}
	}
	return nil
}
