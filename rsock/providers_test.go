package rsock

// The tests run over the default provider, which a program links by
// importing it; rsock itself imports none (nothing above vroce's provider
// seam knows which provider runs).
import _ "vroce.dev/providers/udp"
