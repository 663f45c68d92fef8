package rsock

// The default provider is linked in, so that rsock.Dial works as net.Dial
// does, with nothing else to import. Other providers register themselves
// when their package is imported.
import _ "vroce.dev/providers/udp"
