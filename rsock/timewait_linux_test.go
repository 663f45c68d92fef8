package rsock

import (
	"bufio"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The SOCKET exchange's TCP connection is closed by the listener first,
// so its TIME_WAIT is the listener's, which costs no port, and not the
// dialer's, whose ephemeral port it would hold for a minute (a proxy
// dialing thousands of streams to one service ran out of them).
func TestExchangeTimeWaitIsTheListeners(t *testing.T) {
	l := listen(t, &ListenConfig{Mode: ModeSocket}, "127.0.0.1:0")
	c, s := pair(t, l, &Dialer{Mode: ModeSocket})
	require.Equal(t, "vroce", transport(c))
	exchangePort := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	listenPort := uint16(l.Addr().(*net.TCPAddr).Port)
	c.Close()
	s.Close()
	l.Close()
	settle(t) // the dialer's exchange connection has closed too

	// The listener's end of that connection is in TIME_WAIT (the positive
	// control: the connection was found, and closed by the listener);
	// the dialer's end is gone.
	var listenerTW, dialerTW bool
	require.Eventually(t, func() bool {
		listenerTW, dialerTW = timeWaits(t, listenPort, exchangePort)
		return listenerTW
	}, 5*time.Second, 10*time.Millisecond, "the listener's end of the exchange in TIME_WAIT")
	assert.False(t, dialerTW, "the dialer's end of the exchange holds port %d in TIME_WAIT", exchangePort)
}

// timeWaits reads /proc/net/tcp for the connection between the local
// ports a (listener) and b (dialer): whether a's end and b's end are in
// TIME_WAIT.
func timeWaits(t *testing.T, a, b uint16) (aTW, bTW bool) {
	f, err := os.Open("/proc/net/tcp")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != "06" { // TIME_WAIT
			continue
		}
		local, remote := procPort(fields[1]), procPort(fields[2])
		aTW = aTW || local == a && remote == b
		bTW = bTW || local == b && remote == a
	}
	require.NoError(t, sc.Err())
	return aTW, bTW
}

// procPort is the port of /proc/net/tcp's "ADDR:PORT" (hex).
func procPort(s string) uint16 {
	_, p, _ := strings.Cut(s, ":")
	n, _ := strconv.ParseUint(p, 16, 16)
	return uint16(n)
}
