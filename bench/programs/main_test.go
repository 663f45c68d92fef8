package main

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const wrkClean = `Running 4s test @ http://127.0.0.1:4000/file
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.10ms    1.20ms  20.00ms   80.00%
  21480 requests in 4.00s, 1.31GB read
Requests/sec:   5370.12
Transfer/sec:    336.20MB
`

func TestParseWrk(t *testing.T) {
	rate, err := parseWrk([]byte(wrkClean))
	require.NoError(t, err)
	assert.Equal(t, 5370.12, rate)

	_, err = parseWrk([]byte(wrkClean + "  Socket errors: connect 0, read 3, write 0, timeout 0\n"))
	assert.ErrorContains(t, err, "Socket errors", "a socket error fails the run")
	_, err = parseWrk([]byte(wrkClean + "  Non-2xx or 3xx responses: 12\n"))
	assert.ErrorContains(t, err, "Non-2xx", "a failed request fails the run")
	_, err = parseWrk([]byte("unable to connect to 127.0.0.1:4000 Connection refused\n"))
	assert.Error(t, err)
}

func TestParseRedisCSV(t *testing.T) {
	out := []byte("\"test\",\"rps\",\"avg_latency_ms\"\n\"SET\",\"41666.67\",\"0.700\"\n\"GET\",\"45454.55\",\"0.650\"\n")
	rps, err := parseRedisCSV(out, "get")
	require.NoError(t, err)
	assert.Equal(t, 45454.55, rps)
	_, err = parseRedisCSV(out, "lpush")
	assert.Error(t, err)

	ping := []byte(`"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms"
"PING_INLINE","4938.27","0.188","0.072","0.175","0.287"
"PING_MBULK","3666.36","0.256","0.080","0.215","0.415"
vroce-run: 3 connections over vRoCE (680126 bytes; 0 by RDMA_CM; 0 reset by the peer), 0 over TCP (0 bytes bridged), 1 processes interposed
`)
	p50, err := redisCSVField(ping, "PING_MBULK", "p50_latency_ms")
	require.NoError(t, err)
	assert.Equal(t, 0.215, p50)
	_, err = redisCSVField(ping, "PING_MBULK", "p999_latency_ms")
	assert.Error(t, err, "a column the output does not have")
}

func TestMedian(t *testing.T) {
	assert.Equal(t, 2.0, median([]float64{3, 1, 2}))
	assert.Equal(t, 2.5, median([]float64{4, 1, 2, 3}))
}

// echoServer answers each connection's bytes with themselves, after
// firstDelay on each connection's first read (a chain setting up its far
// side), and with corrupt answers if corrupt is set.
func echoServer(t *testing.T, firstDelay time.Duration, corrupt bool) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				for first := true; ; first = false {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					if first {
						time.Sleep(firstDelay)
					}
					if corrupt {
						buf[0]++
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// The echo load times requests only once every connection has made its
// first exchange, and reports how long that took beside the rate.
func TestEchoLoadTimesRequestsAfterEveryConnectionIsUp(t *testing.T) {
	const slowStart = 300 * time.Millisecond
	rate, setup, err := echoLoad(echoServer(t, slowStart, false), 8, 200*time.Millisecond)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, setup, slowStart, "the first exchanges' wait is the setup")
	// Timed from the dials, 200 ms of load behind 300 ms of setup could
	// not exceed 40% of the timed-after rate; a loopback echo does
	// thousands of exchanges a second per connection.
	assert.Greater(t, rate, 1000.0, "exchanges per second after setup")

	_, _, err = echoLoad(echoServer(t, 0, true), 2, 50*time.Millisecond)
	require.ErrorContains(t, err, "differs")
}

// Each side of a pinned site runs on its own CPU, every program it
// starts alike; an unpinned site leaves them to the scheduler.
func TestASitePinsEachSideToItsCPU(t *testing.T) {
	st := &site{srvNS: "srv", cliNS: "cli", cpus: map[string]int{"srv": 0, "cli": 1}}
	assert.Equal(t, []string{"ip", "netns", "exec", "srv", "taskset", "-c", "0", "nginx", "-g", "x"}, st.command("srv", "nginx", "-g", "x").Args)
	assert.Equal(t, []string{"ip", "netns", "exec", "cli", "taskset", "-c", "1", "wrk", "-c", "200"}, st.command("cli", "wrk", "-c", "200").Args)
	assert.Contains(t, st.describe(), "pinned to a CPU of its own, 0 and 1")
	loose := &site{srvNS: "srv", cliNS: "cli"}
	assert.Equal(t, []string{"ip", "netns", "exec", "cli", "wrk"}, loose.command("cli", "wrk").Args)
	assert.NotContains(t, loose.describe(), "pinned")
}
