// Package minheap is the one binary min-heap of the module: the device's
// timer queue, the connection manager's retransmission deadlines and the
// simulated network's deliveries each keep one. It is generic rather than
// built on container/heap, whose interface boxes every element pushed or
// popped: an allocation per packet on the device's timer path.
package minheap
