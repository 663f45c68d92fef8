// Command vroce-provider-afxdp serves the afxdp provider out of process:
// VROCE_PROVIDER=plugin:afxdp. Given the capabilities it needs as file
// capabilities, it serves programs that have none:
//
//	setcap cap_net_admin,cap_net_raw,cap_bpf,cap_ipc_lock+ep vroce-provider-afxdp
//
// (CAP_IPC_LOCK: the kernel charges the UMEM to an unprivileged user's
// RLIMIT_MEMLOCK otherwise, which it does not fit.)
//
// "vroce-provider-afxdp describe" prints what it is as JSON.
package main
