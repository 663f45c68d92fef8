// Package nonblock makes the system calls of the packet path that cannot
// block (a non-blocking socket's send and receive, an eventfd's doorbell,
// an AF_XDP kick, arming a timerfd) without the runtime's system-call
// entry and exit, and reads and writes a bridge's kernel socket so
// (Stream). Busy pollers pause between looks with a Spin.
//
// Entering a system call wakes the runtime's monitor thread (sysmon)
// whenever it sleeps, and it sleeps whenever every P has been idle: in a
// ping-pong that is between each request and its answer. The wake is a
// futex call, and a thread on another core, which on a small host the
// peer process needed: between two namespaces over veth it cost a 64-byte
// half round trip 2 us of 17, and a 64 KiB write_bw a fifth of its rate.
// A call that cannot block holds its thread only as long as the kernel
// works on it, so the runtime has nothing to take back meanwhile.
package nonblock
