// Package fifo is a first-in first-out queue that keeps its array: when
// the last element leaves, the queue starts again at the front, so a
// steady exchange allocates nothing. (Reslicing from the front, as a
// plain slice queue does, loses capacity with every pop and allocates
// again once empty.)
package fifo
